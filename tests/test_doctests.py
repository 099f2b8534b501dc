"""The `>>>` examples of the public docstrings run (the API reference renders them as code).

Each docstring's examples run in order in one namespace that starts from its module's globals,
in a fresh working directory; `/tmp/...` paths are moved under it. An example that shows its
output (`want`) must print that output (doctest's checker, ELLIPSIS and whitespace-insensitive);
an example that shows none may return anything, since these are usage examples, not tests of
values. What an example takes as given (data files, a config, a trained `algo`) is made by its
SETUP entry below. Every docstring with examples is run or listed in NOT_RUN with the reason;
the two longest (OPT_IN) run only with RLJAX_DOCTESTS_ALL=1.
"""

import doctest
import importlib
import io
import os
import pathlib
import sys
from contextlib import redirect_stdout

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))

import docs_reference  # noqa: E402

NOT_RUN = {
    "rljax_offline.apps.mujoco_datasets": "a 30,000-step SAC run on Hopper (about 10 minutes "
                                          "here; tests/test_mujoco_datasets.py makes tiny sets)",
    "rljax_offline.apps.recipes": "records the full 1,000-episode recipe "
                                  "(tests/test_offline_rl_mixed.py records smaller ones)",
}


def _record(path: str, env: str = "CartPole-v1", episodes: int = 10, **kw) -> None:
    from rljax_offline.acting.env_runner import record_expert
    record_expert(env, path, num_episodes=episodes, progress=False, **kw)


def _episodes(ns: dict) -> None:
    from rljax_offline.data import read_episodes
    _record("rec")
    ns["episodes"] = read_episodes("rec")


def _spaces(ns: dict) -> None:
    import gymnasium as gym
    import optax

    from rljax_offline.models.policy import make_policy
    from rljax_offline.spaces import to_spec
    ns.update(obs_spec=to_spec(gym.spaces.Box(-1.0, 1.0, (3,))),
              act_spec=to_spec(gym.spaces.Discrete(2)), make_policy=make_policy, optax=optax)


def _config(ns: dict) -> None:
    from rljax_offline import CQLConfig
    ns["config"] = CQLConfig().environment("CartPole-v1")


def _algo(ns: dict) -> None:
    from rljax_offline import BCConfig
    _record("rec")
    ns["algo"] = (BCConfig().environment("CartPole-v1").offline_data(input_="rec")
                  .training(num_updates_per_iteration=5)
                  .evaluation(evaluation_interval=0)).build()


def _checkpoint(ns: dict) -> None:
    _algo(ns)
    ns["algo"].save(str(ns["_tmp"] / "ckpt"))
    _record(str(ns["_tmp"] / "cartpole_mixed"), flip_prob=0.3)


def _ppo_checkpoint(ns: dict) -> None:
    from rljax_offline import PPOConfig
    algo = PPOConfig().rl_module(model_config={"fcnet_hiddens": [8]}).build()
    algo.save(str(ns["_tmp"] / "ppo_ckpt"))
    algo.stop()


# The zoo's configs: each example trains on recorded Pendulum episodes.
ZOO = ("awac.AWACConfig", "cal_ql.CalQLConfig", "crr.CRRConfig", "edac.EDACConfig",
       "rebrac.ReBRACConfig", "bcq.BCQConfig", "plas.PLASConfig", "bear.BEARConfig",
       "decision_transformer.DecisionTransformerConfig")

# docstring name -> what its examples take as given.
SETUP = {
    "rljax_offline.learning.trained_policy": _ppo_checkpoint,
    "rljax_offline.algorithms.seeds":
        lambda ns: _record(str(ns["_tmp"] / "pendulum"), "Pendulum-v1", 3),
    "rljax_offline.data.writer.EpisodeWriter": _episodes,
    "rljax_offline.learning.spec": _spaces,
    "rljax_offline.ope.methods": _config,
    "rljax_offline.apps.reporting": _algo,
    "rljax_offline.ope.api": _checkpoint,
    "rljax_offline.algorithms.bc.BCConfig": lambda ns: _record("data/cartpole"),
    "rljax_offline.algorithms.iql.IQLConfig":
        lambda ns: _record("data/cartpole_mixed", flip_prob=0.3),
    "rljax_offline.algorithms.discrete_bcq.DiscreteBCQConfig":
        lambda ns: _record("data/cartpole_mixed", flip_prob=0.3),
    "rljax_offline.algorithms.cql.CQLConfig":
        lambda ns: _record("data/pendulum_mixed", "Pendulum-v1", 3),
    "rljax_offline.algorithms.decision_transformer.DiscreteDecisionTransformerConfig":
        lambda ns: _record("data/cartpole"),
    "rljax_offline.algorithms.td3_bc.TD3BCConfig":
        lambda ns: _record("data/pendulum_mixed", "Pendulum-v1", 3),
    **{f"rljax_offline.algorithms.{m}": lambda ns: _record("data/pendulum_mixed",
                                                             "Pendulum-v1", 3)
       for m in ZOO},
}
# Examples that train for real, 9-18 s each on 2 cores.
SLOW = {"rljax_offline.algorithms.ppo.config.PPOConfig",
        "rljax_offline.algorithms.td3_bc.TD3BCConfig", "rljax_offline.algorithms.iql.IQLConfig",
        "rljax_offline.apps.reporting", "rljax_offline.algorithms.discrete_bcq.DiscreteBCQConfig",
        "rljax_offline.algorithms.decision_transformer.DiscreteDecisionTransformerConfig",
        *(f"rljax_offline.algorithms.{m}" for m in ZOO)}
# Too long for the suite's 10 minutes (they passed when run): RLJAX_DOCTESTS_ALL=1 runs them.
OPT_IN = {"rljax_offline.ope.api": "35 s: FQE's 8,000 updates for two estimators",
          "rljax_offline.algorithms.cql.CQLConfig": "22 s: 100 Box-CQL updates and an evaluation"}


def public_docstring_examples() -> dict[str, doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = {}
    modules = [f"{docs_reference.PACKAGE}.{m}" for m in docs_reference.API_MODULES]
    for package in docs_reference.API_PACKAGES:
        modules += [f"{docs_reference.PACKAGE}.{package}",
                    *docs_reference.public_modules(package)]
    for name in modules:
        module = importlib.import_module(name)
        for test in finder.find(module):
            if test.examples and test.name.startswith(name):  # defined here, not imported
                found[test.name] = test
    return found


EXAMPLES = public_docstring_examples()


def test_every_docstring_with_examples_is_run_or_says_why_not():
    assert len(EXAMPLES) >= 10
    assert set(NOT_RUN) <= set(EXAMPLES) and set(SETUP) <= set(EXAMPLES)


def run_examples(test: doctest.DocTest, tmp_path: pathlib.Path) -> None:
    namespace = {**test.globs, "_tmp": tmp_path}
    SETUP.get(test.name, lambda ns: None)(namespace)
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    for example in test.examples:
        if example.options.get(doctest.SKIP):
            continue
        source = example.source.replace("/tmp/", f"{tmp_path}/")
        out = io.StringIO()
        with redirect_stdout(out):
            exec(compile(source, f"{test.name} (line {example.lineno})", "single"), namespace)
        if example.want:
            assert checker.check_output(example.want, out.getvalue(), flags), (
                f"{test.name}: {example.source.strip()!r} printed {out.getvalue()!r}, "
                f"the docstring shows {example.want!r}")


def _marks(name: str) -> list:
    if name in OPT_IN:
        return [pytest.mark.slow, pytest.mark.skipif(
            not os.environ.get("RLJAX_DOCTESTS_ALL"), reason=f"{OPT_IN[name]}; "
            "RLJAX_DOCTESTS_ALL=1 runs it")]
    return [pytest.mark.slow] if name in SLOW else []


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n))
                                  for n in sorted(set(EXAMPLES) - set(NOT_RUN))])
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_examples(EXAMPLES[name], tmp_path)


def test_a_wrong_shown_output_fails(tmp_path, monkeypatch):
    """The checker is live: the Episode example with a changed expected value fails."""
    monkeypatch.chdir(tmp_path)
    test = EXAMPLES["rljax_offline.episode.episode"]
    broken = doctest.DocTest([*test.examples[:-1], doctest.Example(
        test.examples[-1].source, "(2, 3.0, [0.0, 0.0, 1.0, 2.0])\n")],
        test.globs, test.name, test.filename, test.lineno, test.docstring)
    with pytest.raises(AssertionError, match="the docstring shows"):
        run_examples(broken, tmp_path)
