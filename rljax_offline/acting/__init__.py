"""Acting in gymnasium envs: the pure on-device actor, the `EnvRunner` that steps vector
envs with it, behaviour policies and recording to Parquet."""
