"""`rljax-offline demo`: record expert CartPole, train BC, evaluate and plot, in one go."""

from __future__ import annotations

from rljax_offline.cli.args import non_negative_int, positive_int
from rljax_offline.cli.output import add_command, emit


def run(args) -> int:
    # start-up: apps.demo (algorithms, recording, plotting) costs ~130 ms on top of
    # `import rljax_offline.cli`; only `demo` needs it (measured 2026-11-24).
    from rljax_offline.apps.demo import run_demo, run_full_demo

    (run_full_demo if args.full else run_demo)(
        out_dir=args.out, num_episodes=args.episodes, seed=args.seed,
        progress=not args.quiet, emit=emit)
    return 0


def register(sub) -> None:
    """Adds `demo` and its flags to the subcommands `sub`."""
    p = add_command(
        sub, "demo", "record expert CartPole, train BC, evaluate and plot, in one go",
        "  rljax-offline demo --out demo_output", run)
    p.add_argument("--out", default="demo_output", help="folder for data, run and pictures")
    p.add_argument("--episodes", type=positive_int, default=500,
                   help="expert episodes to record")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of recording and training")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--full", action="store_true",
                   help="RLlib's whole guide: train a PPO expert, record from its checkpoint, "
                        "clone it with BC, fine-tune the clone with PPO, one figure")
