"""On mixed-quality data where behavior cloning fails, MARWIL, CQL and IQL do clearly better.

The data sets are `rljax_offline.apps.recipes`' small recipes: CartPole with 5% expert episodes
among episodes whose actions are mostly flipped, Pendulum with 10% expert episodes among
uniformly random ones. BC copies the poor majority; CQL and IQL use the rewards. Each
algorithm's best evaluation return over a few short iterations is compared (fixed seeds, small
networks; the full-size runs are in benchmarks/algorithms.py).
"""

import pytest
from offline_rl_testlib import best_return

from rljax_offline import BCConfig, CQLConfig, IQLConfig, MARWILConfig
from rljax_offline.apps.recipes import RECIPES, record_mixed

pytestmark = pytest.mark.slow

MODEL = {"fcnet_hiddens": [64, 64]}
IQL_TRAINING = {"beta": 10.0, "expectile": 0.9, "tau": 0.005, "actor_lr": 1e-3,
                "critic_lr": 1e-3, "value_lr": 1e-3}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    for name in ("cartpole-mixed-small", "pendulum-mixed-small"):
        record_mixed(name, str(root / name))
    return root


def configure(config, data, recipe, updates):
    return (config.environment(RECIPES[recipe].env_id).offline_data(input_=str(data / recipe))
            .training(num_updates_per_iteration=updates).rl_module(model_config=MODEL)
            .learners(num_devices=1).evaluation(evaluation_interval=1, evaluation_duration=10)
            .debugging(seed=0))


def test_cartpole_marwil_cql_and_iql_beat_bc(data):
    recipe = "cartpole-mixed-small"
    bc = best_return(configure(BCConfig().training(lr=1e-3), data, recipe, 300), 2)
    marwil = best_return(configure(MARWILConfig().training(lr=1e-3, beta=1.0), data, recipe,
                                   300), 3)
    cql = best_return(configure(CQLConfig().training(target_network_update_freq=200),
                                data, recipe, 500), 4)
    iql = best_return(configure(IQLConfig().training(**IQL_TRAINING), data, recipe, 500), 6)
    print(f"CartPole mixed: best return BC {bc:.1f}, MARWIL {marwil:.1f}, CQL {cql:.1f}, "
          f"IQL {iql:.1f} (expert 500)")
    assert bc < 150
    assert marwil > bc + 150 and cql > bc + 150 and iql > bc + 150


def test_pendulum_cql_and_iql_beat_bc(data):
    recipe = "pendulum-mixed-small"
    bc = best_return(configure(BCConfig().training(lr=1e-3), data, recipe, 300), 2)
    cql = best_return(configure(CQLConfig().training(bc_iters=200, actor_lr=1e-3), data,
                                recipe, 500), 8)
    # d3rlpy's plain Gaussian actor: data actions on the bounds (the expert's +-2) are far
    # out in the squashed actor's tails.
    iql = best_return(configure(IQLConfig().training(actor_squashed=False, **IQL_TRAINING),
                                data, recipe, 500), 8)
    print(f"Pendulum mixed: best return BC {bc:.1f}, CQL {cql:.1f}, IQL {iql:.1f} "
          "(expert about -170)")
    assert bc < -700
    assert cql > bc + 300 and iql > bc + 300
