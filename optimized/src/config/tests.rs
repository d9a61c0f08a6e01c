use super::*;

#[test]
fn specs_round_trip() {
    for s in [
        "default",
        "attention=naive",
        "kv=f16",
        "kv=f32,gemm=wgmma",
        "x16=pass",
        "fp8=w8a8",
        "graphs=off,norms=kernels",
        "pdl=top",
        "qgemv=v4,mma=2.2.1",
        "prefetch=async3",
        "prefetch=wx,int8-decode=magic",
        "gps=32,rpg=8",
        "argmax=v1",
        "draw=bisect",
        "draw=radix",
        "draw=v1,argmax=v1",
        "moe-gemv=v1",
        "moe-route=v2,moe-gemv=v1",
        "moe-gemm=v1",
        "moe-gemm=v3",
        "moe-gemm=v4-always",
        "moe-tile=1.8.1.2.4",
        "moe-tile=2.4.2.4.3p",
        "mma=1.4.0.16",
        "gemv-rows=1",
        "gemv-rows=8",
        "qgemv-rows=8,gemv-rows=1",
        "gemv-split=4",
        "gemv-rows=4,graphs=off",
        "ahead=off",
        "advance=host",
        "advance=device",
        "gemm=mma",
        "gemm=wgmma-v2",
        "gemm=wgmma",
        "gemm=tma",
        "qgemm=mma",
        "qgemm=wgmma",
        "qgemm=mma,gemm=mma",
    ] {
        let k = KernelConfig::parse_any(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(KernelConfig::parse_any(&k.name()).ok(), Some(k), "{s} → {}", k.name());
    }
    assert_eq!(KernelConfig::parse("").ok(), Some(KernelConfig::default()));
    assert_eq!(KernelConfig::default().name(), "default");
    let n = KernelConfig::naive();
    assert_eq!(KernelConfig::parse(&n.name()).ok(), Some(n));
}

/// Lab choices parse only in a lab build; production ones everywhere.
#[test]
fn lab_choices_need_the_lab_feature() {
    for s in [
        "gemm=wgmma-v2",
        "draw=v1",
        "draw=bisect",
        "qgemv=v4",
        "qgemm=tma",
        "mma=1.4.0.16",
        "prefetch=wx",
        "prefetch=pipelined",
        "prefetch=async3",
        "rpg=8",
        "rpg=2",
        "small=3@32",
    ] {
        let k = KernelConfig::parse_any(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert!(k.lab_choice().is_some(), "{s}");
        let r = KernelConfig::parse(s);
        if crate::kernels::lab::ENABLED {
            assert_eq!(r.ok(), Some(k), "{s}");
        } else {
            let e = r.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(&format!("`{s}`")) && e.contains("is a lab kernel: build with --features lab"), "{s}: {e}");
        }
    }
    for s in [
        "default",
        "prefetch=off",
        "prefetch=w",
        "prefetch=async2",
        "int8-decode=magic",
        "rpg=4",
        "gps=32",
        "qgemv=v1",
        "attention=naive",
        "argmax=v1",
        "draw=radix",
        "moe-gemv=v1",
        "gemm=wgmma",
    ] {
        let k = KernelConfig::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(k.lab_choice(), None, "{s}");
    }
    assert_eq!(KernelConfig::naive().lab_choice(), None);
}

#[test]
fn bad_specs_name_the_part() {
    for (s, part) in [
        ("pdl=maybe", "pdl=maybe"),
        ("graphs", "graphs"),
        ("ahead=2", "ahead=2"),
        ("advance=gpu", "advance=gpu"),
        ("qgemv=v9", "qgemv=v9"),
        ("warp=2", "warp=2"),
        ("prefetch=async99", "prefetch=async99"),
        ("rpg=3", "rpg=3"),
        ("mma=x", "mma=x"),
        ("draw=sort", "draw=sort"),
        ("gemv-rows=0", "gemv-rows=0"),
        ("gemv-rows=9", "gemv-rows=9"),
        ("qgemv-rows=0", "qgemv-rows=0"),
        ("gemv-split=3", "gemv-split=3"),
        ("gemv-split=16", "gemv-split=16"),
    ] {
        let e = KernelConfig::parse(s).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(part), "{s}: {e}");
    }
}
