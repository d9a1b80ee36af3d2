import re, os, shutil
base = open("u8/lib/gemm16.wgsl").read()
FRAG_OLD = base[base.index("fn g_frag_a(tr: u32, s: u32)"):base.index("// A whole tile at the product's")]
FRAG_NEW = """fn g_frag_a(tr: u32, s: u32) -> coop_mat16x16<f16, A> {
    let ld = g_lda();
    let at = tr * 16u * ld + s * 4u;
    return coopLoadT<coop_mat16x16<f16, A>>(&g_sa[at], ld);
}

fn g_frag_b(tc: u32, s: u32) -> coop_mat16x16<f16, B> {
    let ld = g_ldb();
    let at = tc * 16u * ld + s * 4u;
    return coopLoad<coop_mat16x16<f16, B>>(&g_sb[at], ld);
}

"""
GA_OLD = base[base.index("fn g_ga(e: u32"):base.index("fn g_slot_a(e: u32)")]
GA_NEW = """fn g_ga(e: u32, m0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / g_rowa();
    let q = e % g_rowa();
    return a[(m0 + sr) * (K_C / 4u) + kc / 4u + q];
}

fn g_gb(e: u32, n0: u32, kc: u32, ke: u32) -> vec4<f16> {
    let sr = e / g_rowb();
    let q = e % g_rowb();
    return b[(n0 + sr) * (K_C / 4u) + kc / 4u + q];
}

"""
i32 = base.index("        if (G_BK > 32u) {")
iend = base.index("        workgroupBarrier();\n    }\n    let r0 = m0 + tr0 * 16u;")
DEAD = base[i32:iend]
def mk(name, frag=False, ga=False, dead=False):
    s = base
    if frag: s = s.replace(FRAG_OLD, FRAG_NEW)
    if ga: s = s.replace(GA_OLD, GA_NEW)
    if dead: s = s.replace(DEAD, "")
    if os.path.exists(name): shutil.rmtree(name)
    shutil.copytree("u8", name)
    open(f"{name}/lib/gemm16.wgsl", "w").write(s)
    assert s != base
#mk("v1", frag=True)
#mk("v2", ga=True)
#mk("v3", frag=True, ga=True)
#mk("v5", dead=True)
#mk("v6", frag=True, ga=True, dead=True)
base = open("u11/lib/gemm16.wgsl").read()
mk("v7", frag=True, ga=True)
