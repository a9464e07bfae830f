"""``tf.train.Example`` protobuf classes, built at import time without protoc or TensorFlow.

The message definitions are TensorFlow's ``tensorflow/core/example/feature.proto`` and
``example.proto`` (Apache-2.0), written here as a ``FileDescriptorProto`` and turned into
classes by the ``protobuf`` runtime. The wire format is therefore byte-compatible with
TensorFlow, DALI and any other reader of ``tf.train.Example``.

The classes live in a private :class:`~google.protobuf.descriptor_pool.DescriptorPool`, so
importing TensorFlow in the same process causes no "duplicate file name" clash.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "BytesList",
    "Example",
    "Feature",
    "FeatureList",
    "FeatureLists",
    "Features",
    "FloatList",
    "Int64List",
    "SequenceExample",
]

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "tensorflow"


def _field(
    msg: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    ftype: int,
    *,
    label: int = _F.LABEL_OPTIONAL,
    type_name: str | None = None,
    packed: bool = False,
    oneof: int | None = None,
) -> None:
    field = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if packed:
        field.options.packed = True
    if oneof is not None:
        field.oneof_index = oneof


def _list_message(
    fdp: descriptor_pb2.FileDescriptorProto, name: str, ftype: int, packed: bool
) -> None:
    msg = fdp.message_type.add(name=name)
    _field(msg, "value", 1, ftype, label=_F.LABEL_REPEATED, packed=packed)


def _map_message(
    fdp: descriptor_pb2.FileDescriptorProto, name: str, field: str, value_type: str
) -> None:
    """``message <name> { map<string, <value_type>> <field> = 1; }``."""
    msg = fdp.message_type.add(name=name)
    entry_name = "".join(part.capitalize() for part in field.split("_")) + "Entry"
    entry = msg.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_MESSAGE, type_name=value_type)
    _field(
        msg, field, 1, _F.TYPE_MESSAGE, label=_F.LABEL_REPEATED, type_name=f"{name}.{entry_name}"
    )


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="gpuspark/tensorflow/core/example/example.proto", package=_PACKAGE, syntax="proto3"
    )
    _list_message(fdp, "BytesList", _F.TYPE_BYTES, packed=False)
    _list_message(fdp, "FloatList", _F.TYPE_FLOAT, packed=True)
    _list_message(fdp, "Int64List", _F.TYPE_INT64, packed=True)

    feature = fdp.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    _field(feature, "bytes_list", 1, _F.TYPE_MESSAGE, type_name="BytesList", oneof=0)
    _field(feature, "float_list", 2, _F.TYPE_MESSAGE, type_name="FloatList", oneof=0)
    _field(feature, "int64_list", 3, _F.TYPE_MESSAGE, type_name="Int64List", oneof=0)

    _map_message(fdp, "Features", "feature", "Feature")
    feature_list = fdp.message_type.add(name="FeatureList")
    _field(
        feature_list, "feature", 1, _F.TYPE_MESSAGE, label=_F.LABEL_REPEATED, type_name="Feature"
    )
    _map_message(fdp, "FeatureLists", "feature_list", "FeatureList")

    example = fdp.message_type.add(name="Example")
    _field(example, "features", 1, _F.TYPE_MESSAGE, type_name="Features")
    seq = fdp.message_type.add(name="SequenceExample")
    _field(seq, "context", 1, _F.TYPE_MESSAGE, type_name="Features")
    _field(seq, "feature_lists", 2, _F.TYPE_MESSAGE, type_name="FeatureLists")
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())


def _cls(name: str) -> type:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


BytesList = _cls("BytesList")
FloatList = _cls("FloatList")
Int64List = _cls("Int64List")
Feature = _cls("Feature")
Features = _cls("Features")
FeatureList = _cls("FeatureList")
FeatureLists = _cls("FeatureLists")
Example = _cls("Example")
SequenceExample = _cls("SequenceExample")
