"""Writes the hostile bytecode inputs of tests/unit/test_bytecode.c (tests/unit/data/bytecode/),
which a C test cannot easily make itself. Run once by hand (needs the pinned jaxlib):
    python3 tests/unit/gen_bytecode_hostile.py

- deep_nesting.mlirbc: 300 stablehlo.if ops nested in each other's regions (the reader caps
  nesting at 256 and must refuse it, not overflow its stack).
- cyclic_type.mlirbc: a real program whose first VHLO tensor type names itself as its element
  type (the reader must refuse the cycle, not recurse forever).

The bytecode layout used here (sections, the MLIR prefix varint, the attribute/type offset table)
is MLIR's documented bytecode format; only what these two edits need is read."""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
from jaxlib.mlir.dialects import stablehlo  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "bytecode")
SEC_ATTR_TYPE, SEC_ATTR_TYPE_OFFSET, SEC_DIALECT = 2, 3, 1


def get_varint(b, i):
    first = b[i]
    if first == 0:
        return int.from_bytes(b[i + 1:i + 9], "little"), i + 9
    n = (first & -first).bit_length()  # bytes: trailing zeros + 1
    return int.from_bytes(b[i:i + n], "little") >> n, i + n


def put_varint(v):
    for n in range(1, 9):
        if v < 1 << (7 * n):
            return ((v << n) | (1 << (n - 1))).to_bytes(n, "little")
    return b"\0" + v.to_bytes(8, "little")


def split(data):
    """-> header bytes, [(id, alignment or None, payload)]"""
    i = 4
    _, i = get_varint(data, i)
    i = data.index(0, i) + 1
    head, secs = data[:i], []
    while i < len(data):
        code = data[i]
        i += 1
        size, i = get_varint(data, i)
        align = None
        if code & 0x80:
            align, i = get_varint(data, i)
            while i % align:
                assert data[i] == 0xCB
                i += 1
        secs.append((code & 0x7F, align, data[i:i + size]))
        i += size
    return head, secs


def join(head, secs):
    out = bytearray(head)
    for sid, align, payload in secs:
        out.append(sid | (0x80 if align else 0))
        out += put_varint(len(payload))
        if align:
            out += put_varint(align)
            while len(out) % align:
                out.append(0xCB)
        out += payload
    return bytes(out)


def dialect_names(payload, strings):
    n, i = get_varint(payload, 0)
    names = []
    for _ in range(n):
        v, i = get_varint(payload, i)
        names.append(strings[v >> 1])
        if v & 1:  # a version section follows
            size, i = get_varint(payload, i)
            i += size
    return names


def string_table(payload):
    n, i = get_varint(payload, 0)
    sizes = []
    for _ in range(n):
        s, i = get_varint(payload, i)
        sizes.append(s)
    sizes.reverse()
    out = []
    for s in sizes:
        out.append(payload[i:i + s - 1].decode())
        i += s
    return out


def cyclic_type():
    text = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""
    data = stablehlo.serialize_portable_artifact_str(text, "1.13.7")
    head, secs = split(data)
    strings = string_table(next(p for s, _, p in secs if s == 0))
    names = dialect_names(next(p for s, _, p in secs if s == SEC_DIALECT), strings)
    k_off = next(k for k, s in enumerate(secs) if s[0] == SEC_ATTR_TYPE_OFFSET)
    k_dat = next(k for k, s in enumerate(secs) if s[0] == SEC_ATTR_TYPE)
    off = secs[k_off][2]
    nattrs, i = get_varint(off, 0)
    ntypes, i = get_varint(off, i)
    entries = []  # (dialect, custom, is_type)
    for is_type, total in ((False, nattrs), (True, ntypes)):
        while sum(1 for e in entries if e[3] == is_type) < total:
            dia, i = get_varint(off, i)
            cnt, i = get_varint(off, i)
            for _ in range(cnt):
                v, i = get_varint(off, i)
                entries.append([dia, v >> 1, v & 1, is_type])
    data_payload, pos, blobs = secs[k_dat][2], 0, []
    for e in entries:
        blobs.append(data_payload[pos:pos + e[1]])
        pos += e[1]
    for k, e in enumerate(entries):  # the first vhlo tensor type (code 20: shape, element type)
        if e[3] and e[2] and names[e[0]] == "vhlo" and get_varint(blobs[k], 0)[0] == 20:
            tidx = k - nattrs
            code, j = get_varint(blobs[k], 0)
            rank, j = get_varint(blobs[k], j)
            for _ in range(rank):
                _, j = get_varint(blobs[k], j)
            blobs[k] = blobs[k][:j] + put_varint(tidx)
            e[1] = len(blobs[k])
            break
    else:
        raise SystemExit("no vhlo tensor type found")
    # re-emit the offset table, one group per entry (the format allows repeated dialects)
    new_off = bytearray(put_varint(nattrs) + put_varint(ntypes))
    for e in entries:
        new_off += put_varint(e[0]) + put_varint(1) + put_varint((e[1] << 1) | e[2])
    secs[k_off] = (SEC_ATTR_TYPE_OFFSET, secs[k_off][1], bytes(new_off))
    secs[k_dat] = (SEC_ATTR_TYPE, secs[k_dat][1], b"".join(blobs))
    return join(head, secs)


def deep_nesting(depth=300):
    lines = ["func.func @main(%p: tensor<i1>, %x: tensor<f32>) -> tensor<f32> {"]
    for d in range(depth):
        lines.append('%%r%d = "stablehlo.if"(%%p) ({' % d)
    lines.append('"stablehlo.return"(%x) : (tensor<f32>) -> ()')
    for d in reversed(range(depth)):
        lines.append('}, { "stablehlo.return"(%x) : (tensor<f32>) -> () }) : (tensor<i1>) -> tensor<f32>')
        lines.append('"stablehlo.return"(%%r%d) : (tensor<f32>) -> ()' % d if d else "return %r0 : tensor<f32>")
    lines.append("}")
    return stablehlo.serialize_portable_artifact_str("\n".join(lines), "1.13.7")


os.makedirs(OUT, exist_ok=True)
for name, blob in (("cyclic_type.mlirbc", cyclic_type()), ("deep_nesting.mlirbc", deep_nesting())):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)
    print(name, len(blob), "bytes")
