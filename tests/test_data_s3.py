"""A real S3 round trip: a local S3-compatible server (moto) on 127.0.0.1, written and read
through `pyarrow.fs.S3FileSystem` with `s3://` URIs."""

import socket

import numpy as np
import pytest

from rljax_offline import Episode
from rljax_offline.data import iter_episodes, read_episodes, write_episodes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    server_mod = pytest.importorskip("moto.server")
    port = free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop()


def test_s3_round_trip(s3_endpoint, monkeypatch):
    import pyarrow.fs as pafs

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                           endpoint_override=s3_endpoint, scheme="http",
                           allow_bucket_creation=True)
    fs.create_dir("rljax-bucket")
    eps = [Episode(observations=np.full((T + 1, 3), T, np.float32), actions=np.zeros(T, int),
                   rewards=np.ones(T), terminated=True) for T in (3, 5, 8)]
    files = write_episodes(eps, "s3://rljax-bucket/cartpole", filesystem=fs,
                           output_max_rows_per_file=2)
    assert len(files) == 2
    back = read_episodes("s3://rljax-bucket/cartpole", input_filesystem=fs)
    assert [len(e) for e in back] == [3, 5, 8]
    # The same data through a self-describing URI, streamed.
    uri = (f"s3://testing:testing@rljax-bucket/cartpole?scheme=http&"
           f"endpoint_override={s3_endpoint}&region=us-east-1")
    assert [e.id_ for e in iter_episodes(uri)] == [e.id_ for e in eps]
