#!/usr/bin/env python3
"""Writes ONNX's protobuf schema as a FileDescriptorSet (onnx.fds) for prost.

The schema is the one the onnx wheel pinned below compiles into onnx/onnx_ml_pb2.py (the wheel's
onnx-ml.proto: onnx.proto plus the ML types, package `onnx`); its serialized FileDescriptorProto is
written unchanged, so field numbers and names are the official ones.

Pinned: onnx==1.17.0
Usage: python dump_descriptor.py OUT.fds   (with that onnx importable)
"""
import sys

from google.protobuf import descriptor_pb2

from onnx import onnx_ml_pb2


def main(out):
    fdp = descriptor_pb2.FileDescriptorProto()
    onnx_ml_pb2.DESCRIPTOR.CopyToProto(fdp)
    fds = descriptor_pb2.FileDescriptorSet(file=[fdp])
    with open(out, "wb") as f:
        f.write(fds.SerializeToString())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: dump_descriptor.py OUT.fds")
    main(sys.argv[1])
