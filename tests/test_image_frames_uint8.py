"""uint8 image observations stay uint8 from the Parquet file to the update (issue 12: frames
are converted on the device, by the CNN): what the loss receives is checked, for data kept on
the devices and for streamed data (the scale benchmark's path)."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline import BCConfig, Episode, write_episodes

OBS = gym.spaces.Box(0, 255, (10, 10, 2), np.uint8)
ACT = gym.spaces.Discrete(3)


class FramesEnv(gym.Env):
    """The spaces of a small image env (never stepped here)."""

    observation_space, action_space = OBS, ACT

    def __init__(self, config=None):
        pass


def _write(path, n=6, length=12):
    rng = np.random.default_rng(0)
    write_episodes([Episode(observations=rng.integers(0, 256, (length + 1, *OBS.shape),
                                                      np.uint8),
                            actions=rng.integers(0, 3, length),
                            rewards=np.zeros(length, np.float32), observation_space=OBS,
                            action_space=ACT) for _ in range(n)], str(path))
    return str(path)


SEEN: list = []


@dataclasses.dataclass(frozen=True)
class ObsSpyBCConfig(BCConfig):
    """BC whose loss notes the dtype and shape of the observations it is traced with."""

    algo_name = "bc_obs_spy"

    def make_spec(self, obs_spec, act_spec):
        spec = super().make_spec(obs_spec, act_spec)
        (loss,) = spec.learning.losses

        def spy(params, batch, rng, axis):
            SEEN.append((np.dtype(batch["obs"].dtype), tuple(batch["obs"].shape[1:])))
            return loss.fn(params, batch, rng, axis)

        return spec._replace(learning=spec.learning._replace(losses=(loss._replace(fn=spy),)))


@pytest.mark.parametrize("streamed", [False, True], ids=["on_device", "streamed"])
def test_loss_receives_uint8_frames_unflattened(tmp_path, streamed):
    SEEN.clear()
    algo = (ObsSpyBCConfig().environment(FramesEnv)
            .offline_data(input_=_write(tmp_path / "frames"), materialize_data=not streamed,
                          materialize_mapped_data=not streamed, input_read_batch_size=2,
                          shuffle_buffer_size=2)
            .training(train_batch_size_per_learner=16, num_updates_per_iteration=1)
            .learners(num_devices=1).evaluation(evaluation_interval=0).build())
    try:
        loss = algo.train()["learners"]["default_policy"]["policy_loss"]
    finally:
        algo.stop()
    assert SEEN and set(SEEN) == {(np.dtype(np.uint8), OBS.shape)}
    assert abs(loss - np.log(3)) < 0.5  # the CNN scaled the frames: a sane first loss
