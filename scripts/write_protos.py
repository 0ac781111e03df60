#!/usr/bin/env python3
"""Write Cortado's Protos/*.proto from the Core ML format's own descriptors.

The Core ML format is defined by field names, numbers, types and message
nesting. Those facts ship, compiled, inside the coremltools package (each
`coremltools/proto/*_pb2.py` embeds its FileDescriptor). This script reads the
descriptors and writes proto3 source in Cortado's own layout:

* one file per format module, a header saying where the facts came from;
* enums first, then messages, each sorted by name;
* fields sorted by number, oneof members grouped under their oneof;
* nested types emitted inside their parent.

Run it from the repository root with the test venv's python:
    .venv/bin/python scripts/write_protos.py Protos/CoreML
then `scripts/generate_swift.sh` to regenerate Sources/CortadoSpec.
"""
import importlib
import os
import pkgutil
import sys

from google.protobuf import descriptor as D

SCALAR = {
    D.FieldDescriptor.TYPE_DOUBLE: "double",
    D.FieldDescriptor.TYPE_FLOAT: "float",
    D.FieldDescriptor.TYPE_INT64: "int64",
    D.FieldDescriptor.TYPE_UINT64: "uint64",
    D.FieldDescriptor.TYPE_INT32: "int32",
    D.FieldDescriptor.TYPE_FIXED64: "fixed64",
    D.FieldDescriptor.TYPE_FIXED32: "fixed32",
    D.FieldDescriptor.TYPE_BOOL: "bool",
    D.FieldDescriptor.TYPE_STRING: "string",
    D.FieldDescriptor.TYPE_BYTES: "bytes",
    D.FieldDescriptor.TYPE_UINT32: "uint32",
    D.FieldDescriptor.TYPE_SFIXED32: "sfixed32",
    D.FieldDescriptor.TYPE_SFIXED64: "sfixed64",
    D.FieldDescriptor.TYPE_SINT32: "sint32",
    D.FieldDescriptor.TYPE_SINT64: "sint64",
}


def type_name(field, package):
    if field.type in SCALAR:
        return SCALAR[field.type]
    target = field.message_type or field.enum_type
    name = target.full_name
    # Fully qualified names keep every reference unambiguous.
    return "." + name


def is_map(field):
    mt = field.message_type
    return mt is not None and mt.GetOptions().map_entry


def field_line(field, package):
    if is_map(field):
        k = field.message_type.fields_by_name["key"]
        v = field.message_type.fields_by_name["value"]
        return f"map<{type_name(k, package)}, {type_name(v, package)}> {field.name} = {field.number};"
    label = ""
    if field.label == D.FieldDescriptor.LABEL_REPEATED:
        label = "repeated "
    elif getattr(field, "has_presence", False) and field.containing_oneof is None and field.message_type is None:
        label = "optional "
    opts = []
    fo = field.GetOptions()
    if field.label == D.FieldDescriptor.LABEL_REPEATED and fo.HasField("packed"):
        opts.append(f"packed = {'true' if fo.packed else 'false'}")
    suffix = f" [{', '.join(opts)}]" if opts else ""
    return f"{label}{type_name(field, package)} {field.name} = {field.number}{suffix};"


def emit_enum(enum, indent):
    pad = "    " * indent
    out = [f"{pad}enum {enum.name} {{"]
    if enum.GetOptions().allow_alias:
        out.append(f"{pad}    option allow_alias = true;")
    for v in sorted(enum.values, key=lambda v: (v.number, v.name)):
        out.append(f"{pad}    {v.name} = {v.number};")
    out.append(f"{pad}}}")
    return out


def emit_message(msg, package, indent):
    pad = "    " * indent
    out = [f"{pad}message {msg.name} {{"]
    for enum in sorted(msg.enum_types, key=lambda e: e.name):
        out += emit_enum(enum, indent + 1)
    for nested in sorted(msg.nested_types, key=lambda m: m.name):
        if nested.GetOptions().map_entry:
            continue
        out += emit_message(nested, package, indent + 1)
    real_oneofs = [o for o in msg.oneofs if not (len(o.fields) == 1 and o.name.startswith("_"))]
    plain = [f for f in msg.fields if f.containing_oneof is None or f.containing_oneof not in real_oneofs]
    for f in sorted(plain, key=lambda f: f.number):
        out.append(f"{pad}    {field_line(f, package)}")
    for o in sorted(real_oneofs, key=lambda o: min(f.number for f in o.fields)):
        out.append(f"{pad}    oneof {o.name} {{")
        for f in sorted(o.fields, key=lambda f: f.number):
            out.append(f"{pad}        {field_line(f, package)}")
        out.append(f"{pad}    }}")
    for r in msg.GetOptions().ListFields():
        pass
    out.append(f"{pad}}}")
    return out


def emit_file(fd):
    lines = [
        "// Cortado's description of the Core ML model format, module " + fd.name + ".",
        "// Field names, numbers and types are the format's own (read from the compiled",
        "// descriptors that ship with coremltools); the layout is Cortado's, written by",
        "// scripts/write_protos.py: enums then messages, sorted by name, fields by number.",
        "",
        'syntax = "proto3";',
        "",
    ]
    for dep in sorted(d.name for d in fd.dependencies):
        lines.append(f'import public "{dep}";' if False else f'import "{dep}";')
    if fd.dependencies:
        lines.append("")
    lines.append("option optimize_for = LITE_RUNTIME;")
    lines.append("")
    lines.append(f"package {fd.package};")
    for enum in sorted(fd.enum_types_by_name.values(), key=lambda e: e.name):
        lines.append("")
        lines += emit_enum(enum, 0)
    for msg in sorted(fd.message_types_by_name.values(), key=lambda m: m.name):
        lines.append("")
        lines += emit_message(msg, fd.package, 0)
    lines.append("")
    return "\n".join(lines)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "Protos/CoreML"
    os.makedirs(outdir, exist_ok=True)
    import coremltools.proto as pkg

    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.endswith("_pb2"))
    for name in names:
        mod = importlib.import_module("coremltools.proto." + name)
        fd = mod.DESCRIPTOR
        path = os.path.join(outdir, fd.name)
        with open(path, "w") as fh:
            fh.write(emit_file(fd))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
