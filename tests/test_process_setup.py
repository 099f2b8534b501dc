"""Process-wide setup (joining `jax.distributed`, the compilation cache) is the explicit step
`runtime.setup.setup(config)` that `config.build()` takes; constructing an `Algorithm` does
neither."""

from conftest import FIXTURES

from rljax_offline import Algorithm, BCConfig
from rljax_offline.runtime import compilation_cache, distributed
from rljax_offline.runtime.setup import ProcessSetup, setup


def test_build_does_the_process_setup_and_the_constructor_does_not(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(distributed, "initialize_from_config",
                        lambda config: calls.append("distributed") or False)
    monkeypatch.setattr(compilation_cache, "enable",
                        lambda setting: calls.append(("cache", setting)) or setting)
    config = (BCConfig().environment("CartPole-v1")
              .offline_data(input_=str(FIXTURES / "episodes"))
              .learners(num_devices=1, compilation_cache_dir=str(tmp_path))
              .evaluation(evaluation_interval=0))
    algo = Algorithm(config)
    assert calls == [] and algo.state is not None
    assert setup(config) == ProcessSetup(False, str(tmp_path))
    calls.clear()
    built = config.build()
    assert calls == ["distributed", ("cache", str(tmp_path))]
    assert built.compilation_cache_dir == str(tmp_path) and not built.multi_process
