"""RLlib users port offline configs by changing imports: the offline-data guide's own config
examples run here verbatim (imports aside), every RLlib `offline_data()` parameter is known,
and the Ray-only knobs say in one line that they have no effect."""


import pytest

from rljax_offline import BCConfig, ConfigError, MARWILConfig
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.algorithms import AlgorithmConfig

# The 18 parameters of RLlib's `offline_data()`, in the order its offline-data guide lists them.
RLLIB_OFFLINE_DATA = [
    "input_", "input_read_method", "input_read_method_kwargs", "input_read_schema",
    "input_read_episodes", "input_read_sample_batches", "input_read_batch_size",
    "input_filesystem", "input_filesystem_kwargs", "input_compress_columns",
    "materialize_data", "materialize_mapped_data", "map_batches_kwargs", "iter_batches_kwargs",
    "prelearner_class", "prelearner_buffer_class", "prelearner_buffer_kwargs",
    "dataset_num_iters_per_learner",
]


def test_every_rllib_offline_data_parameter_is_known():
    ours = {f.name for f in AlgorithmConfig.options("offline_data")}
    assert set(RLLIB_OFFLINE_DATA) <= ours, set(RLLIB_OFFLINE_DATA) - ours


@pytest.fixture(scope="module")
def data_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("cartpole")
    record_expert("CartPole-v1", str(path), num_episodes=10, progress=False)
    return str(path)


def test_guide_bc_example_verbatim(data_path):
    """The guide's "Using offline data" BC config, as printed there (only the import
    differs)."""
    with pytest.warns(UserWarning) as record:
        config = (
            BCConfig()
            .environment(
                # Use the `CartPole-v1` environment from which the data was recorded. This is
                # merely for receiving action and observation spaces and to use it during
                # evaluation.
                env="CartPole-v1",
            )
            .api_stack(
                enable_rl_module_and_learner=True,
                enable_env_runner_and_connector_v2=True,
            )
            .learners(
                # Use a single learner.
                num_learners=0,
            )
            .training(
                # This has to be defined in the new offline RL API.
                train_batch_size_per_learner=1024,
            )
            .offline_data(
                # Link the data.
                input_=[data_path],
                # You want to read in RLlib's episode format b/c this
                # is how you recorded data.
                input_read_episodes=True,
                # Read smaller batches from the data than the learner
                # trains on. Note, each batch element is an episode
                # with multiple timesteps.
                input_read_batch_size=512,
                # Create exactly 2 `DataWorkers` that transform
                # the data on-the-fly. Give each of them a single
                # CPU.
                map_batches_kwargs={
                    "concurrency": 2,
                    "num_cpus": 1,
                },
                # When iterating over the data, prefetch two batches
                # to improve the data pipeline. Do not shuffle the
                # buffer (the data is too small).
                iter_batches_kwargs={
                    "prefetch_batches": 2,
                    "local_shuffle_buffer_size": None,
                },
                # You must set this for single-learner setups.
                dataset_num_iters_per_learner=1,
            )
            .evaluation(
                # Run evaluation to see how well the learned policy
                # performs. Run every 3rd training iteration an evaluation.
                evaluation_interval=3,
                # Use a single `EnvRunner` for evaluation.
                evaluation_num_env_runners=1,
                # In each evaluation rollout, collect 5 episodes of data.
                evaluation_duration=5,
                # Evaluate the policy parallel to training.
                evaluation_parallel_to_training=True,
            )
        )
    messages = [str(w.message) for w in record]
    assert any("map_batches_kwargs" in m and "no effect" in m for m in messages)
    assert any("evaluation_parallel_to_training" in m for m in messages)
    assert all("\n" not in m for m in messages)
    assert config.updates_per_iteration == 1 and config.prefetch_batches == 2
    assert config.evaluation_num_envs == 1
    algo = config.build()
    for _ in range(3):
        result = algo.train()
    assert result["learners"]["default_policy"]["num_module_steps_trained"] == 1024
    assert result["evaluation"]["env_runners"]["num_episodes"] == 5
    algo.stop()


def test_guide_schema_example_verbatim_reads_foreign_columns(tmp_path):
    """The guide's `input_read_schema` example (`Columns.X` written as RLlib's strings, its
    /tmp path a temporary folder) reads a file with those foreign column names."""
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rljax_offline.data import read_episodes

    obs = np.arange(5, dtype=np.float32)[:, None].repeat(4, 1)
    pq.write_table(pa.table({
        "eps_id": ["e"] * 4, "o_t": [list(o) for o in obs[:-1]], "a_t": [0, 1, 0, 1],
        "r_t": [1.0, 2.0, 3.0, 4.0], "o_tp1": [list(o) for o in obs[1:]],
        "i_t": [json.dumps({"k": i}) for i in range(4)], "d_t": [False] * 3 + [True]}),
        tmp_path / "foreign.parquet")
    config = BCConfig().offline_data(
        input_=[str(tmp_path)],
        input_read_schema={"obs": "o_t", "actions": "a_t", "rewards": "r_t",
                           "new_obs": "o_tp1", "infos": "i_t", "done": "d_t"},
    )
    (ep,) = read_episodes(config.input_, input_read_episodes=False,  # a tabular file
                          input_read_schema=config.input_read_schema)
    assert len(ep) == 4 and ep.is_terminated
    np.testing.assert_array_equal(ep.observations, obs)
    np.testing.assert_array_equal(ep.actions, [0, 1, 0, 1])
    np.testing.assert_array_equal(ep.rewards, [1.0, 2.0, 3.0, 4.0])


def test_prelearner_class_and_read_method_hooks(data_path):
    from rljax_offline.data import read_episodes

    seen = []

    class DropShortEpisodes:
        """A user's OfflinePreLearner: keeps episodes of at least 100 steps."""

        def __init__(self, config, spaces):
            self.spaces = spaces

        def __call__(self, episodes):
            seen.append(len(episodes))
            return [ep for ep in episodes if len(ep) >= 100]

    def my_reader(paths, limit):
        return read_episodes(paths)[:limit]

    algo = (MARWILConfig().environment("CartPole-v1")
            .offline_data(input_=data_path, prelearner_class=DropShortEpisodes,
                          input_read_method=my_reader, input_read_method_kwargs={"limit": 4})
            .training(num_updates_per_iteration=2, train_batch_size_per_learner=32)
            .evaluation(evaluation_interval=0).build())
    algo.train()
    assert seen == [4] and algo.num_episodes <= 4
    with pytest.raises(ConfigError, match="input_read_method must be"):
        BCConfig().offline_data(input_read_method="read_csv")
    with pytest.raises(ConfigError, match="only RLlib's new API stack"):
        BCConfig().api_stack(enable_rl_module_and_learner=False)


def test_streaming_needs_both_materialize_flags_off():
    assert not BCConfig().streams_data
    assert not BCConfig().offline_data(materialize_data=False).streams_data
    assert BCConfig().offline_data(materialize_data=False,
                                   materialize_mapped_data=False).streams_data
