#!/usr/bin/env python3
"""Writes the Core ML protobuf schema aneforge needs as a FileDescriptorSet (coreml.fds).

The schema comes from the coremltools wheel pinned in tools/requirements-ci.txt: its
coremltools/proto/*_pb2.py modules embed the serialized FileDescriptorProtos of Apple's
mlmodel/format/*.proto. Only ML Program export is needed, so Model.proto is pruned to the Model,
ModelDescription, FeatureDescription, FunctionDescription and Metadata messages, and the Model.Type
oneof to its mlProgram field; FeatureTypes.proto and MIL.proto are kept whole. Field numbers and
names are untouched, so the bytes written are those of the full schema.

Usage: python dump_descriptors.py OUT.fds   (with coremltools importable)
"""
import sys

from google.protobuf import descriptor_pb2

from coremltools.proto import FeatureTypes_pb2, MIL_pb2, Model_pb2

MODEL_MESSAGES = ["Metadata", "FeatureDescription", "FunctionDescription", "ModelDescription", "Model"]
MODEL_TYPE_FIELDS = {"mlProgram"}


def proto_of(module):
    fdp = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(fdp)
    return fdp


def pruned_model():
    fdp = proto_of(Model_pb2)
    kept = [m for m in fdp.message_type if m.name in MODEL_MESSAGES]
    assert len(kept) == len(MODEL_MESSAGES), "a kept Model.proto message is missing"
    del fdp.message_type[:]
    for message in kept:
        if message.name == "Model":
            type_oneof = [i for i, o in enumerate(message.oneof_decl) if o.name == "Type"]
            assert len(type_oneof) == 1, "Model.Type oneof not found"
            fields = [
                f
                for f in message.field
                if not f.HasField("oneof_index")
                or f.oneof_index != type_oneof[0]
                or f.name in MODEL_TYPE_FIELDS
            ]
            del message.field[:]
            message.field.extend(fields)
        fdp.message_type.add().CopyFrom(message)
    del fdp.dependency[:]
    fdp.dependency.extend(["FeatureTypes.proto", "MIL.proto"])
    return fdp


def check_closed(files):
    """Every message/enum a field refers to is defined in the kept files."""
    defined = set()

    def collect(prefix, messages, enums):
        for e in enums:
            defined.add(f"{prefix}.{e.name}")
        for m in messages:
            name = f"{prefix}.{m.name}"
            defined.add(name)
            collect(name, m.nested_type, m.enum_type)

    for f in files:
        collect("." + f.package, f.message_type, f.enum_type)

    def check(messages):
        for m in messages:
            for field in m.field:
                if field.type_name and field.type_name not in defined:
                    raise SystemExit(f"{m.name}.{field.name} refers to pruned {field.type_name}")
            check(m.nested_type)

    for f in files:
        check(f.message_type)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    files = [proto_of(FeatureTypes_pb2), proto_of(MIL_pb2), pruned_model()]
    check_closed(files)
    fds = descriptor_pb2.FileDescriptorSet()
    fds.file.extend(files)
    with open(sys.argv[1], "wb") as out:
        out.write(fds.SerializeToString(deterministic=True))


if __name__ == "__main__":
    main()
