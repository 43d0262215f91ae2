import ast, sys, os, glob, hashlib
# Extract relevant functions (normalized via ast.unparse, docstrings stripped) from a vllm tree.
WANT = {
 'create_lora_weights': None, '__init__': {'PunicaWrapperBase','PunicaWrapperGPU','LogitsProcessorWithLoRA','BaseLinearLayerWithLoRA','MergedColumnParallelLinearWithLoRA','MergedQKVParallelLinearWithLoRA','QKVParallelLinearWithLoRA','RowParallelLinearWithLoRA','ColumnParallelLinearWithLoRA','VocabParallelEmbeddingWithLoRA'},
 'make': {'LoRAKernelMeta'}, 'add_lora_linear': {'PunicaWrapperGPU'}, 'add_lora_logits': {'PunicaWrapperGPU'},
 'add_lora_embedding': {'PunicaWrapperGPU'}, 'add_shrink': {'PunicaWrapperGPU'}, 'apply': None, 'forward': {'VocabParallelEmbeddingWithLoRA'},
 '_get_logits': {'LogitsProcessorWithLoRA'}, 'from_layer_logits_processor': None, 'get_supported_lora_modules': None,
}
def strip(fn):
    b = fn.body
    if b and isinstance(b[0], ast.Expr) and isinstance(getattr(b[0],'value',None), ast.Constant) and isinstance(b[0].value.value,str):
        fn.body = b[1:] or [ast.Pass()]
    for a in ast.walk(fn.args):
        if isinstance(a, ast.arg): a.annotation=None
    fn.returns=None
    for n in ast.walk(fn):
        if isinstance(n,(ast.FunctionDef,)) and n is not fn: strip(n)
    return fn
root = sys.argv[1]; out = {}
for f in sorted(glob.glob(os.path.join(root,'vllm/lora/**/*.py'), recursive=True)):
    try: t = ast.parse(open(f).read())
    except Exception as e: continue
    def visit(node, cls):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.ClassDef): visit(ch, ch.name)
            elif isinstance(ch,(ast.FunctionDef,)):
                if ch.name in WANT and (WANT[ch.name] is None or cls in WANT[ch.name]):
                    key=f"{cls}.{ch.name}"
                    if ch.name=='apply' and cls not in ('BaseLinearLayerWithLoRA','RowParallelLinearWithLoRA','RowParallelLinearWithShardedLoRA','MergedColumnParallelLinearWithShardedLoRA','MergedQKVParallelLinearWithShardedLoRA','ColumnParallelLinearWithShardedLoRA','QKVParallelLinearWithShardedLoRA'): continue
                    src = ast.unparse(strip(ch))
                    out[key]=(os.path.relpath(f,root), ch.lineno, src)
    visit(t, None)
import json; json.dump(out, open(sys.argv[2],'w'), indent=0)
