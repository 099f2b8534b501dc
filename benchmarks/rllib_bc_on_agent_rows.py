"""RLlib 2.60's own BC trains on our multi-agent data's agent rows.

The multi-agent format's `agents/` folder holds plain single-agent episode rows, one per agent
episode. RLlib's offline reader therefore reads it as it reads single-agent data. Pointed at
it, RLlib's BC trains one module on every agent (parameter sharing). Two steps, two
interpreters:

    # ours: 300 episodes of the simple_spread heuristic (epsilon 0.1)
    PYTHONPATH=. python benchmarks/rllib_bc_on_agent_rows.py record /tmp/spread
    # RLlib 2.60 with torch, in its own interpreter (never a dependency of the package)
    /work/venvs/rllib-ppo/bin/python benchmarks/rllib_bc_on_agent_rows.py train /tmp/spread

`train` runs RLlib's BC (new API stack, RLlib's offline-data guide's settings) on
`/tmp/spread/agents`, prints its loss each iteration, then how often RLlib's trained module
picks the recorded action on the data (chance: 0.2; the heuristic's own share of the actions:
about 0.92).
"""

from __future__ import annotations

import glob
import json
import os
import sys


def record(folder: str) -> None:
    from rljax_offline.apps import make_multi_agent_dataset

    meta = make_multi_agent_dataset("mpe-simple_spread-heuristic-eps0.1", folder,
                                    num_steps=7_500, seed=0, progress=False, eval_episodes=20)
    print(json.dumps({"recorded": folder, "episodes": meta["num_episodes"],
                      "agents": meta["agent_ids"]}))


def train(folder: str, iterations: int = 8) -> None:
    import gymnasium as gym
    import msgpack
    import msgpack_numpy as mnp
    import numpy as np
    import pyarrow.parquet as pq
    import torch
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.columns import Columns
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    obs_space = gym.spaces.Box(-np.inf, np.inf, (18,), np.float32)
    config = (BCConfig()
              .environment(observation_space=obs_space, action_space=gym.spaces.Discrete(5))
              .learners(num_learners=0)
              .training(train_batch_size_per_learner=1024, lr=1e-3)
              .offline_data(input_=[os.path.join(folder, "agents")], input_read_episodes=True,
                            input_read_batch_size=64, dataset_num_iters_per_learner=20,
                            # one data worker: on 2 cores two would hold every CPU and the
                            # read task would wait for one forever
                            map_batches_kwargs={"concurrency": 1, "num_cpus": 1})
              .evaluation(evaluation_interval=0))
    algo = config.build()
    for i in range(iterations):
        result = algo.train()
        loss = result["learners"]["default_policy"]["policy_loss"]
        print(json.dumps({"iteration": i + 1, "rllib_bc_policy_loss": round(float(loss), 4)}),
              flush=True)
    # an offline algorithm has no env runners: the module of the (local) learner
    module = algo.learner_group._learner.module["default_policy"]
    obs, actions = [], []
    for path in sorted(glob.glob(os.path.join(folder, "agents", "*.parquet"))):
        for item in pq.read_table(path).column("item").to_pylist():
            ep = SingleAgentEpisode.from_state(msgpack.unpackb(item, object_hook=mnp.decode))
            obs.append(np.asarray(ep.get_observations())[:-1])
            actions.append(np.asarray(ep.get_actions()))
    obs, actions = np.concatenate(obs), np.concatenate(actions)
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: torch.as_tensor(obs)})
    greedy = out[Columns.ACTION_DIST_INPUTS].argmax(-1).numpy()
    print(json.dumps({"agent_steps": len(actions),
                      "rllib_module_picks_the_recorded_action": round(
                          float(np.mean(greedy == actions)), 3)}))
    algo.stop()


if __name__ == "__main__":
    {"record": record, "train": train}[sys.argv[1]](sys.argv[2])
