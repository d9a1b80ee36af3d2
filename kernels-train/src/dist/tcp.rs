//! A host-staged [`Collective`] over TCP, for launchers without MPI (torchrun, `srun`), and the
//! rendezvous other engines bootstrap from (NCCL's unique id goes through
//! [`Collective::broadcast`]). Rank 0 listens on the launcher's address; every other rank
//! connects to it, and every collective goes through rank 0: it gathers the ranks' values, adds
//! them in rank order, and sends the result back, so every rank gets the same bits. Every read
//! and write is bounded by the timeout: a rank that dies closes its connection, which the
//! others see at once; one that hangs is reported when the timeout passes.
//!
//! A frame is the operation's code (1 byte), the collective's sequence number (8 bytes), the
//! payload's length (8 bytes) and the payload, little-endian; the sequence number catches ranks
//! that call different collectives (runs started with different settings).

use super::{Collective, Rank, read_gradients, write_gradients};
use crate::Error;
use kernels::{Buffer, Gpu};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const HELLO: &[u8; 8] = b"KTRNDV01";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    Gather = 1,
    Broadcast = 2,
    Root = 3,
}

/// The ranks of a run connected through rank 0 ([`super::tcp`]).
pub struct TcpCollective {
    rank: Rank,
    timeout: Duration,
    /// Rank 0: the connections of ranks 1 … world − 1, in rank order. Others: rank 0's.
    peers: Vec<TcpStream>,
    seq: u64,
    /// A failed call leaves the streams mid-frame: later calls are refused.
    broken: Option<String>,
}

impl std::fmt::Debug for TcpCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpCollective").field("rank", &self.rank).field("seq", &self.seq).finish_non_exhaustive()
    }
}

fn resolve(address: &str) -> Result<Vec<SocketAddr>, Error> {
    let found: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| Error::Dist(format!("the rendezvous address {address} does not resolve: {e}")))?
        .collect();
    if found.is_empty() {
        return Err(Error::Dist(format!("the rendezvous address {address} resolves to nothing")));
    }
    Ok(found)
}

impl TcpCollective {
    /// Joins the run: rank 0 listens on `address` (`host:port`) until every other rank has
    /// connected; the others connect to it, retrying while it is not listening yet. Either
    /// waits at most `timeout`.
    pub fn connect(rank: Rank, address: &str, timeout: Duration) -> Result<TcpCollective, Error> {
        let deadline = Instant::now() + timeout;
        let peers = if rank.rank == 0 {
            listen(rank, address, timeout, deadline)?
        } else {
            vec![dial(rank, address, timeout, deadline)?]
        };
        Ok(TcpCollective { rank, timeout, peers, seq: 0, broken: None })
    }

    fn fail(&mut self, e: String) -> Error {
        self.broken = Some(e.clone());
        Error::Dist(e)
    }

    /// What went wrong talking to `peer` during `what`, for a user.
    fn io_error(&self, peer: usize, what: &str, e: std::io::Error) -> String {
        match e.kind() {
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::BrokenPipe
            | ErrorKind::ConnectionAborted => {
                format!(
                    "rank {peer} left the run during {what} (its connection closed: it ended, failed or was killed)"
                )
            }
            ErrorKind::TimedOut | ErrorKind::WouldBlock => format!(
                "rank {peer} did not answer within {} s during {what} (--collective-timeout): it hangs or is far behind",
                self.timeout.as_secs_f64()
            ),
            _ => format!("talking to rank {peer} during {what} failed: {e}"),
        }
    }

    fn start(&mut self) -> Result<u64, Error> {
        if let Some(why) = &self.broken {
            return Err(Error::Dist(format!("an earlier collective failed ({why})")));
        }
        self.seq += 1;
        Ok(self.seq)
    }

    fn send(&mut self, to: usize, op: Op, seq: u64, payload: &[u8], what: &str) -> Result<(), Error> {
        let k = if self.rank.rank == 0 { to - 1 } else { 0 };
        let mut head = [0u8; 17];
        head[0] = op as u8;
        head[1..9].copy_from_slice(&seq.to_le_bytes());
        head[9..17].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        let stream = &mut self.peers[k];
        let r = stream.write_all(&head).and_then(|()| stream.write_all(payload)).and_then(|()| stream.flush());
        r.map_err(|e| {
            let m = self.io_error(to, what, e);
            self.fail(m)
        })
    }

    fn receive(&mut self, from: usize, op: Op, seq: u64, what: &str) -> Result<Vec<u8>, Error> {
        let k = if self.rank.rank == 0 { from - 1 } else { 0 };
        let mut head = [0u8; 17];
        if let Err(e) = self.peers[k].read_exact(&mut head) {
            let m = self.io_error(from, what, e);
            return Err(self.fail(m));
        }
        let their_seq = u64::from_le_bytes(head[1..9].try_into().unwrap_or_default());
        if head[0] != op as u8 || their_seq != seq {
            let m = format!(
                "rank {from} is at another collective than rank {} during {what} (operation {} number {their_seq}, not {} number {seq}): the ranks run different steps; were they started with the same flags?",
                self.rank.rank, head[0], op as u8
            );
            return Err(self.fail(m));
        }
        let len = u64::from_le_bytes(head[9..17].try_into().unwrap_or_default());
        let len = usize::try_from(len).map_err(|_| Error::Dist(format!("rank {from} sent a frame of {len} bytes")))?;
        let mut payload = vec![0u8; len];
        if let Err(e) = self.peers[k].read_exact(&mut payload) {
            let m = self.io_error(from, what, e);
            return Err(self.fail(m));
        }
        Ok(payload)
    }

    /// Rank 0: every rank's `mine`, in rank order; others: empty, after sending `mine`.
    fn gather(&mut self, seq: u64, mine: Vec<u8>, what: &str) -> Result<Vec<Vec<u8>>, Error> {
        if self.rank.rank != 0 {
            self.send(0, Op::Gather, seq, &mine, what)?;
            return Ok(Vec::new());
        }
        let mut all = Vec::with_capacity(self.rank.world);
        all.push(mine);
        for r in 1..self.rank.world {
            all.push(self.receive(r, Op::Gather, seq, what)?);
        }
        Ok(all)
    }

    /// Rank 0's `bytes` on every rank.
    fn send_from_zero(&mut self, seq: u64, bytes: &mut Vec<u8>, what: &str) -> Result<(), Error> {
        if self.rank.rank == 0 {
            for r in 1..self.rank.world {
                self.send(r, Op::Broadcast, seq, bytes, what)?;
            }
        } else {
            *bytes = self.receive(0, Op::Broadcast, seq, what)?;
        }
        Ok(())
    }

    /// The element-wise sum of every rank's `values` in rank order (after the gather), on
    /// every rank.
    fn reduce<T: bytemuck::Pod>(
        &mut self,
        values: &mut [T],
        what: &str,
        combine: impl Fn(&[&[T]], &mut [T]),
    ) -> Result<(), Error> {
        let seq = self.start()?;
        let parts = self.gather(seq, bytemuck::cast_slice(values).to_vec(), what)?;
        let mut out = Vec::new();
        if self.rank.rank == 0 {
            let want = std::mem::size_of_val(values);
            if let Some(r) = parts.iter().position(|p| p.len() != want) {
                let m =
                    format!("rank {r} sent {} bytes for {what}, not {want}: the ranks' models differ", parts[r].len());
                return Err(self.fail(m));
            }
            let typed: Vec<Vec<T>> = parts.iter().map(|p| bytemuck::pod_collect_to_vec(p)).collect();
            let views: Vec<&[T]> = typed.iter().map(Vec::as_slice).collect();
            combine(&views, values);
            out = bytemuck::cast_slice(values).to_vec();
        }
        self.send_from_zero(seq, &mut out, what)?;
        if self.rank.rank != 0 {
            if out.len() != std::mem::size_of_val(values) {
                return Err(self.fail(format!("rank 0 sent {} bytes for {what}", out.len())));
            }
            bytemuck::cast_slice_mut(values).copy_from_slice(&out);
        }
        Ok(())
    }
}

fn listen(rank: Rank, address: &str, timeout: Duration, deadline: Instant) -> Result<Vec<TcpStream>, Error> {
    let addrs = resolve(address)?;
    // The address names rank 0's host as the others reach it; where it is not one of this
    // host's own addresses (a name behind NAT), listen on every interface at its port.
    let listener = TcpListener::bind(&addrs[..])
        .or_else(|_| TcpListener::bind(SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), addrs[0].port())))
        .map_err(|e| {
            Error::Dist(format!(
                "rank 0 cannot listen on {address}: {e} (is the port in use? set MASTER_PORT to a free one)"
            ))
        })?;
    listener.set_nonblocking(true).map_err(|e| Error::Dist(format!("rendezvous: {e}")))?;
    let mut peers: Vec<Option<TcpStream>> = (1..rank.world).map(|_| None).collect();
    while peers.iter().any(Option::is_none) {
        match listener.accept() {
            Ok((mut stream, from)) => {
                let _ = stream.set_nonblocking(false);
                configure(&stream, timeout)?;
                let hello = read_hello(&mut stream);
                let answer = match &hello {
                    Ok((r, w)) if *w != rank.world => {
                        Err(format!("rank {r} counts {w} ranks, rank 0 counts {}", rank.world))
                    }
                    Ok((r, _)) if *r == 0 || *r >= rank.world => Err(format!("a rank {r} in a run of {}", rank.world)),
                    Ok((r, _)) if peers[r - 1].is_some() => Err(format!("two processes say they are rank {r}")),
                    Ok((r, _)) => Ok(*r),
                    // Not one of ours (a port scanner, another run): ignore it.
                    Err(_) => continue,
                };
                let reply = match &answer {
                    Ok(_) => Vec::new(),
                    Err(m) => m.clone().into_bytes(),
                };
                let _ = stream.write_all(&(reply.len() as u32).to_le_bytes()).and_then(|()| stream.write_all(&reply));
                match answer {
                    Ok(r) => peers[r - 1] = Some(stream),
                    Err(m) => return Err(Error::Dist(format!("rendezvous at {address} (from {from}): {m}"))),
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = peers
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| p.is_none())
                        .map(|(k, _)| (k + 1).to_string())
                        .collect();
                    return Err(Error::Dist(format!(
                        "rank 0 waited {} s at {address} and rank(s) {} never connected (--collective-timeout): did they start, and do they see MASTER_ADDR?",
                        timeout.as_secs_f64(),
                        missing.join(", ")
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(Error::Dist(format!("rendezvous at {address}: {e}"))),
        }
    }
    Ok(peers.into_iter().flatten().collect())
}

fn dial(rank: Rank, address: &str, timeout: Duration, deadline: Instant) -> Result<TcpStream, Error> {
    let addrs = resolve(address)?;
    let mut stream = loop {
        let mut failed = None;
        let mut made = None;
        for a in &addrs {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
            match TcpStream::connect_timeout(a, left.min(Duration::from_secs(5))) {
                Ok(s) => {
                    made = Some(s);
                    break;
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(s) = made {
            break s;
        }
        if Instant::now() >= deadline {
            return Err(Error::Dist(format!(
                "rank {} could not reach rank 0 at {address} within {} s (--collective-timeout){}",
                rank.rank,
                timeout.as_secs_f64(),
                failed.map_or(String::new(), |e| format!(": {e}"))
            )));
        }
        // Rank 0 is not listening yet.
        std::thread::sleep(Duration::from_millis(50));
    };
    configure(&stream, timeout)?;
    let mut hello = HELLO.to_vec();
    hello.extend_from_slice(&(rank.rank as u64).to_le_bytes());
    hello.extend_from_slice(&(rank.world as u64).to_le_bytes());
    let joined = stream.write_all(&hello).and_then(|()| {
        let mut len = [0u8; 4];
        stream.read_exact(&mut len)?;
        let mut reply = vec![0u8; u32::from_le_bytes(len) as usize];
        stream.read_exact(&mut reply)?;
        Ok(reply)
    });
    match joined {
        Ok(reply) if reply.is_empty() => Ok(stream),
        Ok(reply) => {
            Err(Error::Dist(format!("rank 0 refused rank {}: {}", rank.rank, String::from_utf8_lossy(&reply))))
        }
        Err(e) => Err(Error::Dist(format!("rank {} joining rank 0 at {address}: {e}", rank.rank))),
    }
}

fn configure(stream: &TcpStream, timeout: Duration) -> Result<(), Error> {
    let set = stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(timeout)))
        .and_then(|()| stream.set_write_timeout(Some(timeout)));
    set.map_err(|e| Error::Dist(format!("rendezvous: {e}")))
}

fn read_hello(stream: &mut TcpStream) -> std::io::Result<(usize, usize)> {
    let mut b = [0u8; 24];
    stream.read_exact(&mut b)?;
    if &b[..8] != HELLO {
        return Err(std::io::Error::new(ErrorKind::InvalidData, "not a trainer rank"));
    }
    let n = |k: usize| u64::from_le_bytes(b[k..k + 8].try_into().unwrap_or_default()) as usize;
    Ok((n(8), n(16)))
}

impl Collective for TcpCollective {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn average_gradients(&mut self, gpu: &Gpu, grads: &[&Buffer<f32>]) -> Result<(), Error> {
        let mut all = read_gradients(gpu, grads)?;
        self.reduce(&mut all, "the all-reduce of the gradients", super::mean_in_rank_order)?;
        write_gradients(gpu, grads, &all)
    }

    fn sum_f64(&mut self, values: &mut [f64]) -> Result<(), Error> {
        self.reduce(values, "a sum over the ranks", |parts, out| {
            for (k, o) in out.iter_mut().enumerate() {
                *o = parts.iter().fold(0.0, |s, p| s + p[k]);
            }
        })
    }

    fn broadcast(&mut self, root: usize, bytes: &mut Vec<u8>) -> Result<(), Error> {
        super::check_root(root, self.rank.world)?;
        let seq = self.start()?;
        let what = format!("a broadcast from rank {root}");
        if root != 0 {
            if self.rank.rank == root {
                let mine = bytes.clone();
                self.send(0, Op::Root, seq, &mine, &what)?;
            } else if self.rank.rank == 0 {
                *bytes = self.receive(root, Op::Root, seq, &what)?;
            }
        }
        self.send_from_zero(seq, bytes, &what)
    }

    fn barrier(&mut self) -> Result<(), Error> {
        let seq = self.start()?;
        self.gather(seq, Vec::new(), "a barrier")?;
        self.send_from_zero(seq, &mut Vec::new(), "a barrier")
    }
}
