#!/usr/bin/env python3
"""Writes the committed seed corpus (fuzz/corpus/*) — small, hand-made inputs covering the
valid layouts and the classic corruptions. Run from anywhere: python3 fuzz/gen_seeds.py"""
import json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))

def st(tensors, meta=None, pad=0, header_len=None, extra=b""):
    """A safetensors file: tensors = [(name, dtype, shape, data_bytes)], tiled in order."""
    hdr, data, off = {}, b"", 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = json.dumps(hdr, separators=(",", ":")).encode() + b" " * pad
    n = len(h) if header_len is None else header_len
    return struct.pack("<Q", n) + h + data + extra

def raw_st(header_obj, data):
    h = json.dumps(header_obj, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data

def f32(*vals):
    return struct.pack("<%df" % len(vals), *vals)

W = "model.layers.0.mlp.up_proj"
fp8_w = bytes((i * 37 + 11) % 0x7E for i in range(4 * 8))  # finite e4m3 codes
good = st([(f"{W}.weight", "F8_E4M3", [4, 8], fp8_w), (f"{W}.weight_scale_inv", "F32", [1, 1], f32(0.5))],
          meta={"format": "pt"})

ST = {
    "valid_fp8_module": good,
    "valid_bf16_padded": st([("a", "BF16", [2, 3], bytes(12))], meta={"format": "pt"}, pad=7),
    "valid_many_dtypes": st([("u8", "U8", [3], b"\x01\x02\x03"), ("i64", "I64", [1], bytes(8)),
                             ("f16", "F16", [2], bytes(4)), ("f64", "F64", [1], bytes(8)),
                             ("u32", "U32", [1], bytes(4)), ("bool", "BOOL", [2], b"\x00\x01")]),
    "valid_zero_sized": st([("empty", "F32", [0, 4], b""), ("x", "F32", [1], f32(1.0))]),
    "valid_empty_header": st([]),
    "valid_scalar": st([("s", "F32", [], f32(2.0))]),
    "subbyte_f4": st([("f4", "F4", [4], b"\x12\x34")]),
    "f8_e8m0": st([("e", "F8_E8M0", [2], b"\x7f\x80")]),
    "offsets_past_end": raw_st({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)),
    "offsets_overlap": raw_st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
    "offsets_gap": raw_st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
    "offsets_reversed": raw_st({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, bytes(8)),
    "size_mismatch": raw_st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)),
    "unknown_dtype": raw_st({"a": {"dtype": "F9", "shape": [1], "data_offsets": [0, 1]}}, bytes(1)),
    "negative_dim": raw_st({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, bytes(1)),
    "shape_overflow": raw_st({"a": {"dtype": "U8", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}}, b""),
    "zero_dim_huge": raw_st({"a": {"dtype": "F32", "shape": [0, 4294967296, 4294967296], "data_offsets": [0, 0]}}, b""),
    "metadata_not_strings": st([("a", "U8", [1], b"\x01")], meta={"format": 1}),
    "header_len_huge": struct.pack("<Q", 1 << 40) + b"{}",
    "header_len_past_end": struct.pack("<Q", 64) + b"{}",
    "header_not_json": struct.pack("<Q", 5) + b"{abc}",
    "header_not_object": struct.pack("<Q", 2) + b"[]",
    "truncated_5_bytes": b"\x08\x00\x00\x00\x00",
    "trailing_bytes": good + b"\x00\x00\x00\x00",
    "missing_fields": raw_st({"a": {"dtype": "U8"}}, b""),
}

CONFIG_QC = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}
CONFIGS = {
    "qwen3_fp8": {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120,
                  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                          "weight_block_size": [128, 128]}},
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"],
                    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                            "weight_block_size": [128, 128]}},
    "ignored_layers": {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                                               "ignored_layers": ["lm_head", "model.layers.0.mlp"],
                                               "modules_to_not_convert": [".mlp.gate."]}},
    "unquantized": {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 8},
    "null_quant": {"quantization_config": None},
    "static_scheme": {"quantization_config": dict(CONFIG_QC, activation_scheme="static")},
    "per_tensor": {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}},
    "block_64": {"quantization_config": dict(CONFIG_QC, weight_block_size=[64, 64])},
    "block_float": {"quantization_config": dict(CONFIG_QC, weight_block_size=[128.0, 128])},
    "e5m2": {"quantization_config": dict(CONFIG_QC, fmt="e5m2")},
    "gptq": {"quantization_config": {"quant_method": "gptq", "bits": 4}},
    "modules_not_list": {"quantization_config": dict(CONFIG_QC, modules_to_not_convert="lm_head")},
    "modules_empty_name": {"quantization_config": dict(CONFIG_QC, modules_to_not_convert=["..", "lm_head"])},
    "quant_not_object": {"quantization_config": [1, 2]},
}

def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

for name, data in ST.items():
    write("safetensors_header", name, data)
for name, cfg in CONFIGS.items():
    write("quant_config", name + ".json", json.dumps(cfg, indent=1).encode())
write("quant_config", "qc_only.json", json.dumps(CONFIG_QC).encode())

def ck(config, stbytes):
    c = json.dumps(config, separators=(",", ":")).encode()
    return struct.pack("<H", len(c)) + c + stbytes

fp8cfg = {"quantization_config": CONFIG_QC}
bad_scale = st([(f"{W}.weight", "F8_E4M3", [4, 8], fp8_w), (f"{W}.weight_scale_inv", "F32", [1, 1], f32(float("nan")))])
wrong_scale_shape = st([(f"{W}.weight", "F8_E4M3", [4, 8], fp8_w), (f"{W}.weight_scale_inv", "F32", [1, 2], f32(1, 1))])
bf16_scale = st([(f"{W}.weight", "F8_E4M3", [4, 8], fp8_w), (f"{W}.weight_scale_inv", "BF16", [1, 1], b"\x00\x3f")])
no_scale = st([(f"{W}.weight", "F8_E4M3", [4, 8], fp8_w)])
dense = st([("lm_head.weight", "F32", [2, 2], f32(1, 2, 3, 4)), (f"{W}.weight", "BF16", [1, 2], bytes(4))])
CK = {
    "valid_fp8": ck(fp8cfg, good),
    "valid_bf16_scale": ck(fp8cfg, bf16_scale),
    "nan_scale": ck(fp8cfg, bad_scale),
    "wrong_scale_shape": ck(fp8cfg, wrong_scale_shape),
    "missing_scale": ck(fp8cfg, no_scale),
    "fp8_without_config": ck({"architectures": ["X"]}, good),
    "excluded_module": ck({"quantization_config": dict(CONFIG_QC, modules_to_not_convert=["mlp"])}, good),
    "dense_only": ck(fp8cfg, dense),
    "bad_header": ck(fp8cfg, ST["offsets_overlap"]),
    "config_not_json": struct.pack("<H", 3) + b"{x}" + good,
}
for name, data in CK.items():
    write("checkpoint_open", name, data)
print("seeds written")
