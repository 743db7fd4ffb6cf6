import statistics, collections, math, itertools
d=collections.defaultdict(list)
for l in open('benchmarks/results/issue52/shm_model_raw/forced_np2.txt'):
    p=l.split(); d[(p[1],int(p[2]))].append(float(p[4]))
M={k:statistics.median(v) for k,v in d.items()}
sizes=sorted({k[1] for k in M})
# registry order (algo/registry.hpp): the first of equal estimates wins, as in choose_allreduce
algos=[a for a in ('ring','recursive_doubling','halving_doubling','tree','direct','star') if any(k[0]==a for k in M)]
def pieces(t,u): q=int((t+u-1)//u); return max(q,1)
def est(a,s,al,be,ga,N=2,seg=512<<10,scr=256<<10):
    P=2**int(math.log2(N)); L=int(math.log2(P)); f=0 if P==N else 1; H=int(math.log2(N))
    if a=='recursive_doubling': return pieces(s,scr)*(L+2*f)*al+(L+2*f)*s*be+(L+f)*s*ga
    if a=='halving_doubling': return (2*L+2*f)*al+1.1*(2*(P-1)/P+2*f)*s*be+((P-1)/P+f)*s*ga
    if a=='ring': Sr=pieces(s/N,seg); return (2*(N-1)+Sr-1)*al+2*(N-1)/N*s*be+(N-1)/N*s*ga
    if a=='direct': return pieces(s,scr)*(N-1)*al+(N-1)*s*be+(N-1)*s*ga
    if a=='tree': St=pieces(s/2,seg); return 2*(2*H+St-1)*al+(2*s+2*H*s/(2*St))*be+s*ga
    if a=='star': return N*al+2*(N-1)*s*be+(N-1)*s*ga
def report(al,be,ga,show=False):
    worst=1; tot=0
    for s in sizes:
        best=min(M[(a,s)] for a in algos)
        ch=min(algos,key=lambda a:est(a,s,al,be,ga))
        r=M[(ch,s)]/best; worst=max(worst,r); tot+=math.log(r)
        if show: print(f"{s:>9} chosen {ch:18} {M[(ch,s)]:9.1f}us best {best:9.1f} regret {r:.2f}")
    return worst, math.exp(tot/len(sizes))
print("previous model (10, 4.5e-5, 0): worst regret, geometric mean:", report(10,4.5e-5,0))
report(10,4.5e-5,0,True)
# least squares on relative error, alpha from small sizes
small=[M[(a,s)] for a in ('recursive_doubling',) for s in sizes if s<=1024]
al=statistics.median(small); print("alpha (RD median <=1K):",al)
best=None
for be in [x*1e-6 for x in range(2,200,2)]:
  for ga in [x*1e-6 for x in range(0,300,3)]:
    err=sum(math.log(est(a,s,al,be,ga)/M[(a,s)])**2 for a in algos for s in sizes if s>=65536 and a in ('recursive_doubling','halving_doubling','ring','direct'))
    if best is None or err<best[0]: best=(err,be,ga)
print("LSQ fit from 64K (error, beta, gamma):",best)
print("fitted model: worst regret, geometric mean:")
print(report(al,best[1],best[2])); report(al,best[1],best[2],True)
