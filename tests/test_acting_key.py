"""Acting with a key: a policy that draws when it acts (`ActingSpec(takes_key=True)`,
`act(params, key, obs)`) acts in an env through the actor (a fresh key each step), exports
as one greedy graph with the key fixed, and runs through off-policy evaluation (keys from its
seed). The example samples K candidate actions from a trained BC policy and acts with the
one drawn most often (a majority vote, written as logits its categorical's greedy action
and samples agree on)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline import BCConfig, ope
from rljax_offline.acting.actor import actor_for
from rljax_offline.acting.env_runner import EnvRunner, record_expert
from rljax_offline.export import export_policy, load_stablehlo, policy_parts
from rljax_offline.learning.trained_policy import TrainedPolicy

K = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("key") / "cartpole")
    record_expert("CartPole-v1", path, num_episodes=16, mix="expert:0.5,random:0.5", seed=0,
                  progress=False)
    return path


@pytest.fixture(scope="module")
def k_candidates(data) -> TrainedPolicy:
    """BC's trained policy, acting by a vote over K candidates drawn with the step's key."""
    algo = (BCConfig().environment("CartPole-v1").offline_data(input_=data)
            .training(num_updates_per_iteration=30)
            .rl_module(model_config={"fcnet_hiddens": [16]}).build())
    algo.train()
    bc = algo.policy()
    algo.stop()
    base, dist = bc.acting.act, bc.acting.dist

    def act(params, key, obs):
        logits = base(params, obs)
        keys = jax.random.split(key, K)
        votes = sum(jax.nn.one_hot(dist.sample(logits, k), logits.shape[-1]) for k in keys)
        return jnp.where(votes == votes.max(axis=-1, keepdims=True), 0.0, -1e9)  # the mode

    return bc._replace(acting=bc.acting._replace(act=act, takes_key=True))


def test_the_key_decides_the_candidates(k_candidates):
    obs = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
    a = k_candidates.acting.act_with_key(k_candidates.params, jax.random.PRNGKey(1), obs)
    b = k_candidates.acting.act_with_key(k_candidates.params, jax.random.PRNGKey(2), obs)
    assert np.any(np.argmax(a, -1) != np.argmax(b, -1))  # other draws, other votes somewhere


def test_the_actor_passes_a_fresh_key_each_step(k_candidates):
    runner = EnvRunner("CartPole-v1", actor_for(k_candidates), num_envs=2, seed=0)
    try:
        episodes = runner.sample(num_episodes=2)
    finally:
        runner.close()
    assert len(episodes) == 2 and all(len(ep) > 0 for ep in episodes)


def test_greedy_export_fixes_the_key(k_candidates, tmp_path):
    out = export_policy(policy_parts(k_candidates), str(tmp_path / "k.stablehlo"))
    fn = load_stablehlo(out)
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    first, _ = fn(obs)
    again, _ = fn(obs)
    np.testing.assert_array_equal(first, again)
    assert set(np.unique(np.asarray(first))) <= {0, 1}


def test_off_policy_evaluation_passes_the_key(k_candidates, data):
    methods = {"is": {"type": "is"},
               "fqe": {"type": "fqe", "num_updates": 30, "model_config": {"fcnet_hiddens": [16]}}}
    est = ope.estimate(k_candidates, data, methods=methods, gamma=0.9, num_bootstrap=10)
    assert np.isfinite(est["fqe"]["v_target"])
    assert est["is"]["ess"] is not None and est["is"]["num_episodes"] == 16
