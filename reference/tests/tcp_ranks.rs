//! Ranks as processes on the reference, here as threads over real localhost sockets: the TCP
//! communicator's collectives give the loopback group's bits (sums in rank order); the model
//! sharded over TCP ranks (each holding only its [`RankModel`]) gives the loopback group's
//! logits exactly; the rendezvous refuses a wrong world size, model, or a rank taken twice,
//! names a rank that never comes, and a rank whose connection drops is an error naming it,
//! never a hang. Run with `--release`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reference::arch;
use reference::arch::model::new_cache;
use reference::parallel::rendezvous::{accept_on, join, Hello, PROTOCOL};
use reference::parallel::tcp::{lock, SharedLink};
use reference::parallel::{Communicator, LoopbackGroup, RankModel, ShardPlan, TcpComm};

const T: Duration = Duration::from_secs(20);

fn hello(rank: usize, world: usize) -> Hello {
    Hello { protocol: PROTOCOL, rank, world, model: "m".into(), device: "cpu".into() }
}

/// Rank 0's links and every worker's, `world` ranks rendezvoused on a free localhost port.
fn links(world: usize) -> (Vec<SharedLink>, Vec<SharedLink>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::scope(|s| {
        // Joined in reverse order: rank 0 still lists them by rank.
        let hs: Vec<_> = (1..world)
            .rev()
            .map(|r| {
                s.spawn({
                    let addr = addr.clone();
                    move || join(&addr, &hello(r, world), T).unwrap()
                })
            })
            .collect();
        let lead = accept_on(&l, &hello(0, world), T).unwrap();
        let mut workers: Vec<SharedLink> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        workers.reverse();
        (lead, workers)
    })
}

/// The `world` TCP communicators, rank r at index r.
fn comms(world: usize) -> Vec<TcpComm> {
    let (lead, workers) = links(world);
    let mut out = vec![TcpComm::new(0, world, lead).unwrap()];
    out.extend(workers.into_iter().enumerate().map(|(i, l)| TcpComm::new(i + 1, world, vec![l]).unwrap()));
    out
}

fn on_ranks<T: Send>(comms: &[TcpComm], f: impl Fn(&TcpComm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn tcp_collectives_give_the_loopback_bits() {
    let c = comms(3);
    // 1e8 + 1 − 1e8: 0 in rank order only.
    let got = on_ranks(&c, |c| {
        let mut b = vec![[1e8f32, 1.0, -1e8][c.rank()], c.rank() as f32];
        c.all_reduce_sum(&mut b).unwrap();
        c.all_reduce_sum(&mut b).unwrap();
        (b, c.all_gather(&[c.rank() as f32, 10.0 + c.rank() as f32]).unwrap())
    });
    for (sum, all) in &got {
        assert_eq!(sum, &vec![0.0, 9.0]);
        assert_eq!(all, &vec![0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
    }
    // Rank s sends rank d [s, d] repeated s + 1 times.
    let got = on_ranks(&c, |c| {
        let s = c.rank();
        c.all_to_all((0..3).map(|d| [s as f32, d as f32].repeat(s + 1)).collect()).unwrap()
    });
    for (d, recv) in got.iter().enumerate() {
        for (s, m) in recv.iter().enumerate() {
            assert_eq!(m, &[s as f32, d as f32].repeat(s + 1), "rank {d} from rank {s}");
        }
    }
    let e = on_ranks(&c, |c| c.all_gather(&vec![0.0; c.rank() + 1]).map(|_| ()));
    assert!(e[0].as_ref().unwrap_err().to_string().contains("all-gather: rank 1 sent 2 values, rank 0 has 1"), "{:?}", e[0]);
}

#[test]
fn the_model_over_tcp_ranks_gives_the_loopback_logits() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny");
    for (name, n) in [("llama3", 2), ("qwen3_moe", 2), ("qwen3", 4)] {
        let m = arch::load(&fixture.join(name)).unwrap();
        let plan = ShardPlan::new(&m.spec, n).unwrap();
        let group = LoopbackGroup::new(&m.spec, &m.weights, plan.clone()).unwrap();
        let ranks: Vec<RankModel> = (0..n).map(|r| RankModel::new(&m.spec, &m.weights, &plan, r).unwrap()).collect();
        let c = comms(n);
        let ids = [1u32, 5, 42, 7, 90];
        let want = group.forward(&ids, &mut group.new_caches()).unwrap();
        let got = std::thread::scope(|s| {
            let hs: Vec<_> = ranks.iter().zip(&c).map(|(rk, c)| s.spawn(move || rk.forward(c, &ids, &mut new_cache(&rk.spec)).unwrap())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        for (r, g) in got.iter().enumerate() {
            assert_eq!(g, &want, "{name}: rank {r} of {n} over TCP vs the loopback group");
        }
    }
}

#[test]
fn the_rendezvous_refuses_and_times_out_naming_the_rank() {
    let refused = |worker: Hello, words: &str| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let w = std::thread::spawn(move || join(&addr, &worker, T).map(|_| ()));
        let e = accept_on(&l, &hello(0, 2), T).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(words), "rank 0: {e}");
        let e = w.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("refused rank") && e.contains(words), "worker: {e}");
    };
    refused(hello(1, 3), "rank 1 was started with world size 3 and rank 0 with --tensor-parallel 2");
    refused(Hello { model: "other".into(), ..hello(1, 2) }, "rank 1 loaded another model (other) than rank 0 (m)");
    refused(Hello { protocol: PROTOCOL + 1, ..hello(1, 2) }, "different tandem builds");
    refused(hello(2, 2), "a rank 2 in a group of 2");

    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let t = Instant::now();
    let e = accept_on(&l, &hello(0, 3), Duration::from_millis(300)).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("tensor-parallel rank 1, 2 did not connect"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let e = join(&addr, &hello(1, 2), Duration::from_millis(300)).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("rank 1: rank 0 did not listen at"), "{e}");
}

#[test]
fn a_dropped_rank_is_an_error_naming_it() {
    let (lead, workers) = links(3);
    let c0 = TcpComm::new(0, 3, lead).unwrap();
    let c1 = TcpComm::new(1, 3, vec![workers[0].clone()]).unwrap();
    // Rank 2's process ends: its connection closes.
    lock(&workers[1]).unwrap().close();
    drop(workers);
    let (e0, e1) = std::thread::scope(|s| {
        let h = s.spawn(|| c1.all_reduce_sum(&mut [1.0]));
        let e0 = c0.all_reduce_sum(&mut [1.0]).unwrap_err().to_string();
        // Rank 0 ends (or its lead runner closes its links): rank 1 is not left waiting.
        drop(c0);
        (e0, h.join().unwrap().unwrap_err().to_string())
    });
    assert!(e0.contains("tensor-parallel rank 2 (127.0.0.1:") && e0.contains("closed the connection"), "{e0}");
    assert!(e1.contains("tensor-parallel rank 0 (127.0.0.1:") && e1.contains("closed the connection"), "{e1}");
}
