"""RLlib's old-API-stack `SampleBatch` JSON lines: each line a batch, read as one finished
episode (as RLlib does: terminated/truncated when any row of the batch
says so). Columns: `obs`, `actions`, `rewards`, `new_obs`, `dones` or
`terminateds`/`truncateds`, `eps_id`, plus anything else as extra model outputs."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from rljax_offline.data.errors import OfflineDataError
from rljax_offline.episode import Episode, EpisodeError

_SKIP = {"obs", "actions", "rewards", "new_obs", "dones", "terminateds", "truncateds",
         "eps_id", "infos", "type", "t", "unroll_id", "agent_index"}


def read_sample_batch_json(path: str) -> Iterator[Episode]:
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise OfflineDataError("file does not exist", file=path) from None
    with fh:
        for row, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                batch = json.loads(line)
            except json.JSONDecodeError as e:
                raise OfflineDataError(f"not JSON: {e}", file=path, row=row) from None
            if batch.get("type", "SampleBatch") not in ("SampleBatch",):
                raise OfflineDataError(f"unsupported batch type {batch.get('type')!r}",
                                       file=path, row=row)
            for col in ("obs", "actions", "rewards"):
                if col not in batch:
                    raise OfflineDataError("missing column", file=path, row=row, column=col)
            obs = np.asarray(batch["obs"])
            new_obs = np.asarray(batch.get("new_obs", batch["obs"]))
            term = np.asarray(batch.get("terminateds", batch.get("dones", [False])), bool)
            trunc = np.asarray(batch.get("truncateds", [False]), bool)
            eps_id = batch.get("eps_id", [None])[0]
            try:
                yield Episode(
                    observations=np.concatenate([obs, new_obs[-1:]]),
                    actions=np.asarray(batch["actions"]),
                    rewards=np.asarray(batch["rewards"], np.float64),
                    extra_model_outputs={k: np.asarray(v) for k, v in batch.items()
                                         if k not in _SKIP},
                    terminated=bool(term.any()), truncated=bool(trunc.any()),
                    id_=None if eps_id is None else str(eps_id))
            except EpisodeError as e:
                raise OfflineDataError(f"batch is not an episode: {e}", file=path,
                                       row=row) from None
