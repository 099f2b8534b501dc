"""Acting in gymnasium envs: the pure on-device actor (which owns the observation window), the
one actor protocol the `EnvRunner` that steps vector envs speaks, behaviour policies and
recording to Parquet."""
