import sys, statistics, collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    p=l.split()
    d[(p[1],int(p[2]))].append(float(p[4]))  # time us
algos=sorted({k[0] for k in d})
print("size | "+" | ".join(a[:6] for a in algos)+" | best  (median time us)")
for s in sorted({k[1] for k in d}):
    m={a:statistics.median(d[(a,s)]) for a in algos if d[(a,s)]}
    best=min(m,key=m.get)
    print(f"{s} | "+" | ".join(f"{m[a]:.1f}" for a in algos)+f" | {best}")
