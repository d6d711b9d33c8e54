"""Reading XLA's HLO text dump: opcodes, fused opcodes, op_name, custom-call targets and Python source frames."""

from __future__ import annotations

from moekit.observe.profiles import hlo

# The layout XLA prints (--xla_dump_to): stack-frame tables, then computations; a printed parent_frame_id is the
# parent's id + 1 (1: no parent), as XLA's own HLO parser reads it.
DUMP = """HloModule jit_train_step, is_scheduled=true, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

FileNames
1 "maxtext/layers/moe.py"

FunctionNames
1 "RoutedMoE.sparse_matmul.<locals>.gmm"
2 "RoutedMoE.sparse_matmul.<locals>.jax_ragged_dot_gmm"
3 "RoutedMoE.unpermute"

FileLocations
1 {file_name_id=1 function_name_id=1 line=2340 end_line=2340 column=1 end_column=9}
2 {file_name_id=1 function_name_id=2 line=2195 end_line=2195 column=1 end_column=9}
3 {file_name_id=1 function_name_id=3 line=1736 end_line=1736 column=1 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=1}


%fused_computation.1 (param_0.1: bf16[16,8], param_1.1: bf16[8,8]) -> bf16[16,8] {
  %param_0.1 = bf16[16,8]{1,0} parameter(0)
  %param_1.1 = bf16[8,8]{1,0} parameter(1)
  ROOT %dot.4 = bf16[16,8]{1,0} dot(%param_0.1, %param_1.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, \
metadata={op_name="jit(train_step)/jvp()/while/body/eval_jaxpr/dot_general" stack_frame_id=2}
}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  ROOT %t = (s32[], f32[8]{0}) tuple(%p)
}

ENTRY %main.9 (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %ynn_fusion.3 = bf16[16,8]{1,0} fusion(%a, %a), kind=kCustom, calls=%fused_computation.1, \
metadata={op_name="jit(train_step)/jvp()/while/body/eval_jaxpr/dot_general" stack_frame_id=2}
  %gather.7 = (f32[8]{0}, /*index=1*/s32[]) gather(%a), metadata={op_name="jit(train_step)/state[\\'model\\']" \
stack_frame_id=3}
  %while.5 = (s32[], f32[8]{0}) while(%a), condition=%cond, body=%body
  %custom-call.2 = f32[8]{0} custom-call(%a), custom_call_target="__cublas$lt$matmul"
  ROOT %all-gather-start.1 = f32[8]{0} all-gather-start(%a), replica_groups={{0,1}}, dimensions={0}
}
""".replace("\\\n", "")


def test_instructions_carry_what_the_classification_needs():
    ins = hlo.parse(DUMP)
    fusion = ins["ynn_fusion.3"]
    assert fusion.opcode == "fusion" and fusion.fused == {"dot", "parameter"}
    assert fusion.frames == (
        "RoutedMoE.sparse_matmul.<locals>.jax_ragged_dot_gmm",
        "RoutedMoE.sparse_matmul.<locals>.gmm",
    )
    assert fusion.op_name.endswith("/dot_general")
    gather = ins["gather.7"]  # a tuple shape with a comment inside, an escaped quote in op_name
    assert gather.opcode == "gather" and gather.op_name == "jit(train_step)/state['model']"
    assert gather.frames == ("RoutedMoE.unpermute",)
    assert ins["while.5"].opcode == "while" and "tuple" in ins["while.5"].fused
    assert ins["custom-call.2"].target == "__cublas$lt$matmul"
    assert ins["all-gather-start.1"].opcode == "all-gather-start"
    assert ins["dot.4"].opcode == "dot"  # fused computations' instructions are listed too


def test_find_dump_prefers_the_traced_program(tmp_path):
    for n in (22, 34):
        (tmp_path / f"module_00{n}.jit_train_step.cpu_after_optimizations.txt").write_text(DUMP)
    (tmp_path / "module_0034.jit_train_step.before_optimizations.txt").write_text("")
    assert hlo.find_dump(tmp_path, "jit_train_step", 22).name.startswith("module_0022.")
    assert hlo.find_dump(tmp_path, "jit_train_step", 99).name.startswith("module_0034.")
    assert hlo.find_dump(tmp_path, "jit_other", None) is None
    assert hlo.load(tmp_path / "missing", "jit_train_step", 22) == {}
