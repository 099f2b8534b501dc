"""Team returns of every multi-agent data set's behaviour (`rljax-offline datasets list`, the
`mpe-*-heuristic-eps*` recipes): what `datasets make` records with `--seed 0` on its first
EPISODES episodes (env seeds 0, 1, ..., 8 env copies, the policies' draws from seed 0, the
same episodes as the data), and the env steps per second of the recording. Prints one JSON
line a set and a Markdown table (docs/guides/multi-agent-datasets.md). Needs the
`[multiagent]` extra.

    PYTHONPATH=. python benchmarks/multi_agent_ladder.py [EPISODES] [ENV ...]
"""

from __future__ import annotations

import json
import sys
import time

from rljax_offline.apps.multi_agent_datasets import RECIPES
from rljax_offline.apps.multi_agent_record import team_returns


def main(episodes: int, envs: list[str]) -> None:
    rows = []
    for r in RECIPES.values():
        if envs and r.env not in envs:
            continue
        team_returns(r.env, r.epsilon, 8, seed=0)  # compile outside the timing
        t0 = time.perf_counter()
        ret = team_returns(r.env, r.epsilon, episodes, seed=0)
        rate = episodes * 25 / (time.perf_counter() - t0)
        row = {"dataset": r.name, "epsilon": r.epsilon, "episodes": episodes,
               "return_mean": round(float(ret.mean()), 1), "return_std": round(float(ret.std()), 1),
               "env_steps_per_s": round(rate)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("\n| data set | epsilon | team return (mean +- std) | env steps/s |\n|---|---|---|---|")
    for row in rows:
        print(f"| `{row['dataset']}` | {row['epsilon']} | {row['return_mean']} +- "
              f"{row['return_std']} | {row['env_steps_per_s']:,} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200, sys.argv[2:])
