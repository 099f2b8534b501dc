"""Reads TensorBoard event files back without TensorFlow (TFRecord framing + tensorboardX's
protobuf), so tests can check which scalars a run logged."""

import glob
import struct


def read_tensorboard_scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
    """Tag -> [(step, value)] from the event files in `logdir`."""
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list] = {}
    for path in sorted(glob.glob(f"{logdir}/events.out.tfevents.*")):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):  # record: u64 length, u32 crc, payload, u32 crc
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for v in event.summary.value:
                if v.WhichOneof("value") == "simple_value":
                    out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out
