//! The servers under load: each a child process on a free loopback port,
//! killed (and its data removed) when dropped.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::client::{Conn, Result};

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `portcullis serve`, its redb database on a disk file system.
    PcDisk,
    /// The same on tmpfs (`/dev/shm`), where a durable commit is nearly free.
    PcTmpfs,
    /// node-oidc-provider (benches/peers/oidc.mjs).
    Oidc,
    /// The MCP TypeScript SDK's auth router (benches/peers/sdk.mjs).
    Sdk,
    /// A bare hyper server answering a fixed 200 (the `floor` binary).
    Floor,
}

impl Kind {
    pub const ALL: [Self; 5] = [
        Self::PcDisk,
        Self::PcTmpfs,
        Self::Oidc,
        Self::Sdk,
        Self::Floor,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::PcDisk => "pc-disk",
            Self::PcTmpfs => "pc-tmpfs",
            Self::Oidc => "oidc",
            Self::Sdk => "sdk",
            Self::Floor => "floor",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    pub fn is_portcullis(self) -> bool {
        matches!(self, Self::PcDisk | Self::PcTmpfs)
    }
}

/// The paths a flow uses, from the server's metadata document.
#[derive(Clone, Debug, Default)]
pub struct Endpoints {
    pub metadata: String,
    pub authorize: String,
    pub token: String,
    pub register: String,
}

/// What a load needs to know of a running server.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: Kind,
    pub pid: u32,
    pub addr: SocketAddr,
    /// Path of the MCP endpoint (the bearer-checked call).
    pub mcp_path: String,
    /// The resource indicator tokens are asked for (the MCP URL).
    pub resource: String,
    pub endpoints: Endpoints,
}

pub struct Server {
    pub target: Target,
    child: Child,
    /// Removed when the server is dropped.
    data: Option<PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.data {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Where the pieces are.
pub struct Bins {
    pub portcullis: PathBuf,
    pub floor: PathBuf,
    pub node: String,
    /// benches/peers (the node scripts and their node_modules).
    pub peers_dir: PathBuf,
    /// A directory on disk for the disk database and the servers' logs.
    pub work: PathBuf,
    /// A directory on tmpfs, if there is one.
    pub tmpfs: Option<PathBuf>,
    /// A redb file (and its `.keys`) Portcullis starts on a copy of.
    pub seed_db: Option<PathBuf>,
}

/// Starts one server and waits until it answers its metadata document.
pub async fn start(kind: Kind, bins: &Bins, run: usize) -> Result<Server> {
    let tag = format!("{}-run{run}", kind.name());
    let log = bins.work.join(format!("{tag}.log"));
    let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let (mut cmd, data) = match kind {
        Kind::PcDisk | Kind::PcTmpfs => {
            let base = if kind == Kind::PcDisk {
                bins.work.clone()
            } else {
                bins.tmpfs
                    .clone()
                    .ok_or("no tmpfs (/dev/shm) on this machine")?
            };
            let dir = base.join(format!("{tag}-db-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            if let Some(seed) = &bins.seed_db {
                copy_seed(seed, &dir.join("portcullis.redb"))?;
            }
            let mut cmd = Command::new(&bins.portcullis);
            cmd.arg("serve")
                .arg("--db")
                .arg(dir.join("portcullis.redb"))
                .args(["--addr", "127.0.0.1:0"])
                // One log line per request is a cost the peers do not pay.
                .env(
                    "RUST_LOG",
                    std::env::var("PEERS_PORTCULLIS_LOG").unwrap_or_else(|_| "warn".to_owned()),
                );
            (cmd, Some(dir))
        }
        Kind::Oidc | Kind::Sdk => {
            let script = if kind == Kind::Oidc {
                "oidc.mjs"
            } else {
                "sdk.mjs"
            };
            let mut cmd = Command::new(&bins.node);
            cmd.arg(script)
                .current_dir(&bins.peers_dir)
                .env("NODE_ENV", "production");
            (cmd, None)
        }
        Kind::Floor => (Command::new(&bins.floor), None),
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("{tag}: spawn: {e}"))?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    // Reads the banner, then keeps draining stdout so the child never blocks.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut server = Server {
        target: Target {
            kind,
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            mcp_path: "/mcp".to_owned(),
            resource: String::new(),
            endpoints: Endpoints::default(),
        },
        child,
        data,
    };
    let mut port = None;
    let mut mcp_url = None;
    while port.is_none() || (kind != Kind::Floor && mcp_url.is_none()) {
        let line = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| {
            format!(
                "{tag} did not start; its log {}:\n{}",
                log.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        })?;
        let line = line.trim();
        if let Some(p) = line.strip_prefix("LISTENING ") {
            port = p.trim().parse::<u16>().ok();
        } else if let Some(a) = line.strip_prefix("Portcullis demo server on ") {
            port = a.rsplit_once(':').and_then(|(_, p)| p.trim().parse().ok());
        } else if let Some(u) = line.strip_prefix("MCP URL:") {
            mcp_url = Some(u.trim().to_owned());
        }
    }
    let port = port.ok_or("no port")?;
    let target = &mut server.target;
    target.addr = SocketAddr::from(([127, 0, 0, 1], port));
    if let Some(url) = mcp_url {
        let origin = format!("http://{}", target.addr);
        target.mcp_path = url
            .strip_prefix(&origin)
            .ok_or_else(|| format!("{tag}: MCP URL {url} not on {origin}"))?
            .to_owned();
        target.resource = url;
    }
    if kind != Kind::Floor {
        target.endpoints = endpoints(target).await.map_err(|e| format!("{tag}: {e}"))?;
    }
    Ok(server)
}

/// Copies the seeded database `seed` and its key file to `db` and
/// `db.keys` (the key file keeps its owner-only mode: `std::fs::copy`
/// copies permissions).
fn copy_seed(seed: &Path, db: &Path) -> Result<()> {
    let keys = |p: &Path| {
        let mut k = p.as_os_str().to_owned();
        k.push(".keys");
        PathBuf::from(k)
    };
    for (from, to) in [(seed.to_path_buf(), db.to_path_buf()), (keys(seed), keys(db))] {
        std::fs::copy(&from, &to)
            .map_err(|e| format!("{} to {}: {e}", from.display(), to.display()))?;
    }
    Ok(())
}

/// The endpoints named by the server's metadata document.
async fn endpoints(server: &Target) -> Result<Endpoints> {
    // node-oidc-provider publishes only the OpenID Connect discovery
    // document (the same fields).
    let metadata = if server.kind == Kind::Oidc {
        "/.well-known/openid-configuration"
    } else {
        "/.well-known/oauth-authorization-server"
    };
    let mut conn = Conn::open(server.addr).await?;
    let doc = conn
        .get(metadata, None)
        .await?
        .expect(200, "metadata")?
        .json("metadata")?;
    let origin = format!("http://{}", server.addr);
    let path = |field: &str| -> Result<String> {
        let url = doc[field]
            .as_str()
            .ok_or_else(|| format!("metadata has no {field}"))?;
        Ok(url.strip_prefix(&origin).unwrap_or(url).to_owned())
    };
    Ok(Endpoints {
        metadata: metadata.to_owned(),
        authorize: path("authorization_endpoint")?,
        token: path("token_endpoint")?,
        register: path("registration_endpoint")?,
    })
}

/// The version a node package in benches/peers resolved to.
pub fn node_package_version(peers_dir: &Path, package: &str) -> String {
    let path = peers_dir
        .join("node_modules")
        .join(package)
        .join("package.json");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}
