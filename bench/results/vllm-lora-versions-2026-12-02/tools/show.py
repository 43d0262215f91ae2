import json, sys, difflib
a,b=sys.argv[1],sys.argv[2]; keys=sys.argv[3:]
da=json.load(open(f"/tmp/lora-cmp/tools/{a}.json")); db=json.load(open(f"/tmp/lora-cmp/tools/{b}.json"))
for k in (keys or sorted(set(da)|set(db))):
    x=da.get(k); y=db.get(k)
    if x and y and x[2]==y[2]: continue
    print(f"##### {k}: {a} {x[0]+':'+str(x[1]) if x else '-'}  {b} {y[0]+':'+str(y[1]) if y else '-'}")
    if x and y:
        for l in difflib.unified_diff(x[2].splitlines(), y[2].splitlines(), lineterm='', n=1): print(l)
