#!/usr/bin/env python3
"""Checks Core ML packages with coremltools' own loader and op definitions.

For every NAME.mlpackage in the given directories:
  1. coremltools.models.MLModel(path, skip_model_load=True) reads Manifest.json and model.mlmodel;
  2. coremltools.converters.mil.frontend.milproto.load.load(spec, specification_version,
     file_weights_dir) rebuilds the ML Program with coremltools' builder, so every op is
     type-checked by coremltools' definitions (op name, argument names, dtypes, const-ness,
     shapes) and every declared output type is compared with the inferred one; BLOBFILE values
     are read from weights/weight.bin;
  3. the model description's inputs and outputs must match each function's inputs and outputs
     (names, dtypes, shapes);
  4. when NAME.weights.json sits next to the package (written by the corpus generator for every
     encoded weight: original values and the error the encoder reported), coremltools' own
     decompression of that const/constexpr op must reproduce the reported max abs error exactly
     and the relative L2 error to 1e-9.

Prints one OK/FAIL line per package and a closing "N passed, M failed" line; exits 1 on any
failure or when a directory holds no package.

With --expect-fail every package must be rejected, and when NAME.expect sits next to it, the
rejection message must contain its text.

Usage: coreml_check.py [--expect-fail] DIR [DIR ...]
"""
import argparse
import logging
import os
import sys
import traceback
import warnings
from pathlib import Path

logging.getLogger("coremltools").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import json  # noqa: E402

import numpy as np  # noqa: E402

import coremltools as ct  # noqa: E402
from coremltools.converters.mil.frontend.milproto import load as milproto  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402
from coremltools.proto import FeatureTypes_pb2  # noqa: E402

ARRAY_DTYPES = {
    FeatureTypes_pb2.ArrayFeatureType.FLOAT32: types.fp32,
    FeatureTypes_pb2.ArrayFeatureType.FLOAT16: types.fp16,
    FeatureTypes_pb2.ArrayFeatureType.INT32: types.int32,
    FeatureTypes_pb2.ArrayFeatureType.DOUBLE: types.fp64,
}


def feature_signature(feature):
    kind = feature.type.WhichOneof("Type")
    if kind != "multiArrayType":
        raise AssertionError(f"feature {feature.name} is a {kind}, expected a multiArrayType")
    array = feature.type.multiArrayType
    dtype = ARRAY_DTYPES.get(array.dataType)
    if dtype is None:
        raise AssertionError(f"feature {feature.name} has unsupported array dtype {array.dataType}")
    return feature.name, types.builtin_to_string(dtype), tuple(array.shape)


def var_signature(var):
    shape = tuple(d if isinstance(d, int) else 1 for d in var.shape)
    return var.name, types.builtin_to_string(var.dtype), shape


def check_description(spec, program):
    description = spec.description
    if len(description.functions) > 0:
        described = {f.name: (f.input, f.output) for f in description.functions}
        if description.defaultFunctionName not in described:
            raise AssertionError(
                f"default function {description.defaultFunctionName!r} is not described"
            )
    else:
        described = {"main": (description.input, description.output)}
    if set(described) != set(program.functions):
        raise AssertionError(
            f"described functions {sorted(described)} != program functions {sorted(program.functions)}"
        )
    for name, (inputs, outputs) in described.items():
        function = program.functions[name]
        want_in = [feature_signature(f) for f in inputs]
        have_in = [var_signature(v) for v in function.inputs.values()]
        if want_in != have_in:
            raise AssertionError(f"{name}: described inputs {want_in} != function inputs {have_in}")
        want_out = [feature_signature(f) for f in outputs]
        have_out = [var_signature(v) for v in function.outputs]
        if want_out != have_out:
            raise AssertionError(
                f"{name}: described outputs {want_out} != function outputs {have_out}"
            )


def materialized(program, name):
    for function in program.functions.values():
        for op in function.operations:
            if op.outputs and op.outputs[0].name == name:
                if op.op_type == "const":
                    return np.asarray(op.outputs[0].val)
                if op.op_type.startswith("constexpr_"):
                    return np.asarray(op.materialized_val_inference())
                raise AssertionError(f"{name} is produced by {op.op_type}, not a const/constexpr op")
    raise AssertionError(f"no op produces {name}")


def check_weights(program, expectations):
    for name, want in expectations.items():
        decoded = materialized(program, name)
        if list(decoded.shape) != want["shape"]:
            raise AssertionError(f"{name}: coremltools decodes shape {list(decoded.shape)}, expected {want['shape']}")
        original = np.asarray(want["values"], dtype=np.float64).reshape(want["shape"])
        error = decoded.astype(np.float64) - original
        max_abs = float(np.max(np.abs(error)))
        rel_l2 = float(np.linalg.norm(error) / np.linalg.norm(original))
        if max_abs != want["max_abs"] or abs(rel_l2 - want["rel_l2"]) > 1e-9 * max(rel_l2, 1e-30):
            raise AssertionError(
                f"{name} ({want['scheme']}): coremltools decodes max abs {max_abs!r}, rel L2 {rel_l2!r}; "
                f"the encoder reported {want['max_abs']!r}, {want['rel_l2']!r}"
            )


def check_package(path):
    """Returns None when coremltools accepts the package, else the reason."""
    try:
        model = ct.models.MLModel(str(path), skip_model_load=True)
        spec = model.get_spec()
        if spec.WhichOneof("Type") != "mlProgram":
            return f"model type is {spec.WhichOneof('Type')}, expected mlProgram"
        weights_dir = os.path.join(str(path), "Data", "com.apple.CoreML", "weights")
        program = milproto.load(
            spec,
            specification_version=spec.specificationVersion,
            file_weights_dir=weights_dir,
        )
        check_description(spec, program)
        expectations = Path(str(path)[: -len(".mlpackage")] + ".weights.json")
        if expectations.exists():
            check_weights(program, json.loads(expectations.read_text()))
    except Exception as e:  # noqa: BLE001 - any failure is a verdict on the package
        message = f"{type(e).__name__}: {e}".strip()
        if os.environ.get("COREML_CHECK_TRACEBACK"):
            message += "\n" + traceback.format_exc()
        return message.replace("\n", " | ")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect-fail", action="store_true")
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args()
    passed = failed = 0
    for directory in args.dirs:
        packages = sorted(directory.glob("*.mlpackage"))
        if not packages:
            print(f"FAIL {directory}: no .mlpackage inside")
            failed += 1
            continue
        for package in packages:
            reason = check_package(package)
            name = package.name
            if not args.expect_fail:
                ok, line = reason is None, f"{name}" if reason is None else f"{name}: {reason}"
            else:
                expect_file = package.with_suffix(".expect")
                expected = expect_file.read_text().strip() if expect_file.exists() else ""
                if reason is None:
                    ok, line = False, f"{name}: coremltools accepted a package it must reject"
                elif expected and expected not in reason:
                    ok, line = False, f"{name}: rejected, but not for {expected!r}: {reason}"
                else:
                    ok, line = True, f"{name}: rejected as expected: {reason}"
            print(("OK   " if ok else "FAIL ") + line)
            passed += ok
            failed += not ok
    print(f"coreml_check: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
