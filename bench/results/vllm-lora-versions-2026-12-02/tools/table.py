import json,sys
vs=sys.argv[1].split()
d={v:json.load(open(f"/tmp/lora-cmp/tools/{v}.json")) for v in vs}
ref=d["0.33.0"]
keys=sorted(set().union(*[set(x) for x in d.values()]))
for k in keys:
    if 'FusedMoE' in k or 'Classif' in k or 'Rotary' in k: continue
    line=[('-' if d[v].get(k) is None else ('=' if k in ref and d[v][k][2]==ref[k][2] else 'D')) for v in vs]
    print(f"{k:60s} {' '.join(f'{c:>2}' for c in line)}")
print(' '*60, ' '.join(f"{v.split('.')[1]:>2}" for v in vs))
