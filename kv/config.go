package kv

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Addr is the HTTP listen address used by ListenAndServe callers; Serve takes a
	// listener and ignores it.
	Addr string
	// MaxKeyBytes bounds the length of a key in bytes.
	MaxKeyBytes int
	// MaxValueBytes bounds a value (the PUT body, each txn put value): 413 above it.
	MaxValueBytes int64
	// MaxTxnBodyBytes bounds the JSON body of POST /v1/txn and /v1/compact: 413 above it.
	MaxTxnBodyBytes int64
	// MaxListLimit is the largest accepted ?limit= (400 above it; a typed list clamps
	// to it), the most items a list without ?limit= answers with (413 ListTooLarge
	// above it), and the limit of a ranged txn get that asks for none.
	MaxListLimit int
	// MaxListBytes bounds the key and value bytes of one list answer: a page that
	// would exceed it ends early with a continue token (a page always holds at least
	// one item when one is left in the range), and a list without ?limit= that would
	// exceed it is refused with 413 ListTooLarge.
	MaxListBytes int
	// RequestTimeout bounds the store work of one request (apply or read index).
	RequestTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout configure the
	// http.Server built by Serve (0 = no timeout for the last three).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// SecretWait bounds how long a request waits for the cluster secret before it
	// answers 503 (continue tokens cannot be signed or checked without it).
	SecretWait time.Duration
	// RetryAfter is the Retry-After (whole seconds, at least 1) sent with 503 and 504.
	RetryAfter time.Duration
	// MaxWatches bounds the watches one node serves at once: 429 above it.
	MaxWatches int
	// MaxWatchesPerToken bounds the watches one token (by accessor ID) holds on a node
	// at once, over every door (0 = no bound but MaxWatches; without ACLs it does not
	// apply): 429 above it, so one token cannot take every slot.
	MaxWatchesPerToken int
	// MaxLeases bounds the live leases of the cluster: a grant beyond it is answered
	// 429 before Raft (0 = no bound). MaxLeasesPerToken bounds those one token (by
	// accessor ID) granted through this node (0 = only MaxLeases; without ACLs it does
	// not apply). See leaselimits.go.
	MaxLeases, MaxLeasesPerToken int
	// MaxConns bounds the client connections (HTTP, stream and etcd) open at once: one
	// more is answered 429 TooManyConnections and closed (connlimits.go).
	MaxConns int
	// MaxConnsPerClient bounds the client connections open at once from one source IP
	// address (0 = no bound but MaxConns), so one client cannot take every slot. A
	// stream multiplexed on a connection (the etcd door's Watch, LeaseKeepAlive,
	// RangeStream, Snapshot and gRPC health Watch) counts against it as a connection
	// does (Server.OpenStream): one more is refused with 429 TooManyConnections.
	MaxConnsPerClient int
	// MaxInFlight bounds the requests running at once (HTTP, and each request of
	// every stream; not watches or health checks): 429 TooManyRequests above it.
	MaxInFlight int
	// MaxInFlightPerClient bounds the requests running at once from one source IP
	// address (0 = no bound but MaxInFlight). On the etcd door a call holds its slot
	// from its headers on, its request message not yet come included.
	MaxInFlightPerClient int
	// MaxStreamInFlight bounds the requests in flight on one stream connection: the
	// server stops reading it until one finishes (backpressure). It bounds the calls
	// open at once on one etcd door connection alike (HTTP/2's
	// SETTINGS_MAX_CONCURRENT_STREAMS): the client waits to open one more.
	MaxStreamInFlight int
	// MaxRequestBytesInFlight bounds the bytes of request bodies a node holds at once
	// (HTTP bodies, stream-protocol frames, etcd gRPC messages; 0 = no bound), and
	// MaxRequestBytesInFlightPerClient those of one source IP address (0 = no bound but
	// the node's). A request takes its size when it is known — announced, before its
	// bytes are read — and gives it back when it is done; one over either is refused
	// with 429 TooManyRequests (bytelimits.go). Each is at least MaxRequestBytes, so a
	// lone request of the largest size is always admitted.
	MaxRequestBytesInFlight, MaxRequestBytesInFlightPerClient int64
	// MaxStreamWatches bounds the watches one stream-protocol connection carries at
	// once (0 = no bound but MaxWatches): a watch above it is refused with a 429.
	MaxStreamWatches int
	// StreamFrameTimeout bounds how long a stream frame, once begun, may take to
	// arrive whole; a connection that stalls mid-frame is closed.
	StreamFrameTimeout time.Duration
	// TLS, when set, makes the HTTP port (and the stream protocol on it) HTTPS; with
	// ClientAuth set it also checks client certificates. Use GetConfigForClient to
	// reload certificates while serving.
	TLS *tls.Config
	// RequireClientCert answers 401 ClientCertRequired to a request that came without
	// a verified client certificate (TLS.ClientAuth should be VerifyClientCertIfGiven,
	// so that a bad certificate fails the handshake and none at all reaches here);
	// /healthz, /livez and /readyz stay open.
	RequireClientCert bool
	// Insecure marks a node started with -insecure (plain text outside dev mode):
	// /v1/status says so.
	Insecure bool
	// WatchBuffer bounds the events queued for one watch and not yet written to its
	// connection; a watch whose buffer fills ends with reason SlowWatcher.
	WatchBuffer int
	// ACLDefault is what a cluster whose ACL system is not bootstrapped allows: ACLAllow
	// serves every request, ACLDeny only health, status and the bootstrap route. Once
	// bootstrapped, every route but those needs a token, whatever the default.
	ACLDefault string
}

// MaxRequestBytesLimit is the most MaxValueBytes and MaxTxnBodyBytes may be set to.
// One request becomes one Raft log entry, and the log refuses an entry over
// wal.MaxRecordBytes (256 MiB) — after the request was accepted, as a failed write.
// A quarter of that leaves room for the command's encoding around the body.
const MaxRequestBytesLimit = 64 << 20

// MaxRequestBytes is the largest request any door must accept whole: a put of the
// largest value under the longest key, or the largest txn body. A door sizes its
// frames and messages by it (plus its own framing); the rules inside (MaxValueBytes,
// MaxTxnBodyBytes) are the core's.
func (c Config) MaxRequestBytes() int64 {
	return max(c.MaxValueBytes+int64(c.MaxKeyBytes), c.MaxTxnBodyBytes)
}

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		Addr:                 "127.0.0.1:7370",
		MaxKeyBytes:          4096,
		MaxValueBytes:        1536 * 1024,
		MaxTxnBodyBytes:      8 << 20,
		MaxListLimit:         10000,
		MaxListBytes:         32 << 20,
		RequestTimeout:       10 * time.Second,
		ReadHeaderTimeout:    10 * time.Second,
		ReadTimeout:          time.Minute,
		WriteTimeout:         2 * time.Minute,
		IdleTimeout:          2 * time.Minute,
		SecretWait:           2 * time.Second,
		RetryAfter:           time.Second,
		MaxWatches:           10000,
		MaxStreamWatches:     10000,
		MaxWatchesPerToken:   2000,
		MaxLeases:            10000,
		MaxLeasesPerToken:    1000,
		MaxConns:             10000,
		MaxConnsPerClient:    2500,
		MaxInFlight:          20000,
		MaxInFlightPerClient: 2500, // one client's worst case under 10,000 goroutines (connlimits.go)
		MaxStreamInFlight:    1024,
		// 8 of the largest requests (8 MiB txn bodies) per client, hundreds of typical
		// ones (kube-apiserver's objects are tens of KiB); 4 clients' worth per node.
		MaxRequestBytesInFlight:          256 << 20,
		MaxRequestBytesInFlightPerClient: 64 << 20,
		StreamFrameTimeout:               10 * time.Second,
		WatchBuffer:                      1024,
		ACLDefault:                       ACLAllow,
	}
}

// Validate reports every bad value, naming each and the field it must agree with.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("kv: Addr %q: %w", c.Addr, err))
	}
	if c.MaxKeyBytes < 1 {
		errs = append(errs, fmt.Errorf("kv: MaxKeyBytes %d must be >= 1", c.MaxKeyBytes))
	}
	if c.MaxValueBytes < 1 {
		errs = append(errs, fmt.Errorf("kv: MaxValueBytes %d must be >= 1", c.MaxValueBytes))
	}
	if c.MaxValueBytes > MaxRequestBytesLimit || c.MaxTxnBodyBytes > MaxRequestBytesLimit {
		errs = append(errs, fmt.Errorf("kv: MaxValueBytes %d and MaxTxnBodyBytes %d must be <= %d (MiB %d): one request becomes one Raft log entry",
			c.MaxValueBytes, c.MaxTxnBodyBytes, MaxRequestBytesLimit, MaxRequestBytesLimit>>20))
	}
	if c.MaxTxnBodyBytes < c.MaxValueBytes {
		errs = append(errs, fmt.Errorf("kv: MaxTxnBodyBytes %d must be >= MaxValueBytes %d",
			c.MaxTxnBodyBytes, c.MaxValueBytes))
	}
	if c.MaxListLimit < 1 {
		errs = append(errs, fmt.Errorf("kv: MaxListLimit %d must be >= 1", c.MaxListLimit))
	}
	if c.MaxListBytes < 1 {
		errs = append(errs, fmt.Errorf("kv: MaxListBytes %d must be >= 1", c.MaxListBytes))
	}
	if c.MaxInFlightPerClient < 0 {
		errs = append(errs, fmt.Errorf("kv: MaxInFlightPerClient %d must be >= 0", c.MaxInFlightPerClient))
	}
	if c.MaxConnsPerClient < 0 {
		errs = append(errs, fmt.Errorf("kv: MaxConnsPerClient %d must be >= 0", c.MaxConnsPerClient))
	}
	if c.MaxConns < 1 || c.MaxInFlight < 1 || c.MaxStreamInFlight < 1 {
		errs = append(errs, fmt.Errorf("kv: MaxConns %d, MaxInFlight %d, MaxStreamInFlight %d must be >= 1",
			c.MaxConns, c.MaxInFlight, c.MaxStreamInFlight))
	}
	if rb := c.MaxRequestBytes(); (c.MaxRequestBytesInFlight != 0 && c.MaxRequestBytesInFlight < rb) ||
		(c.MaxRequestBytesInFlightPerClient != 0 && c.MaxRequestBytesInFlightPerClient < rb) {
		errs = append(errs, fmt.Errorf("kv: MaxRequestBytesInFlight %d and MaxRequestBytesInFlightPerClient %d must be 0 or >= the largest request, %d (MaxValueBytes+MaxKeyBytes, MaxTxnBodyBytes)",
			c.MaxRequestBytesInFlight, c.MaxRequestBytesInFlightPerClient, rb))
	}
	if c.StreamFrameTimeout <= 0 {
		errs = append(errs, fmt.Errorf("kv: StreamFrameTimeout %v must be > 0", c.StreamFrameTimeout))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("kv: RequestTimeout %v must be > 0", c.RequestTimeout))
	}
	if c.ReadHeaderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("kv: ReadHeaderTimeout %v must be > 0", c.ReadHeaderTimeout))
	}
	if c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("kv: ReadTimeout %v, WriteTimeout %v, IdleTimeout %v must be >= 0",
			c.ReadTimeout, c.WriteTimeout, c.IdleTimeout))
	}
	if c.WriteTimeout > 0 && c.WriteTimeout <= c.RequestTimeout {
		errs = append(errs, fmt.Errorf("kv: WriteTimeout %v must exceed RequestTimeout %v (or be 0)",
			c.WriteTimeout, c.RequestTimeout))
	}
	if c.SecretWait <= 0 {
		errs = append(errs, fmt.Errorf("kv: SecretWait %v must be > 0", c.SecretWait))
	}
	if c.MaxWatches < 0 || c.MaxStreamWatches < 0 || c.MaxWatchesPerToken < 0 || c.WatchBuffer < 1 {
		errs = append(errs, fmt.Errorf("kv: MaxWatches %d, MaxStreamWatches %d and MaxWatchesPerToken %d must be >= 0 and WatchBuffer %d >= 1",
			c.MaxWatches, c.MaxStreamWatches, c.MaxWatchesPerToken, c.WatchBuffer))
	}
	if c.MaxLeases < 0 || c.MaxLeasesPerToken < 0 {
		errs = append(errs, fmt.Errorf("kv: MaxLeases %d and MaxLeasesPerToken %d must be >= 0", c.MaxLeases, c.MaxLeasesPerToken))
	}
	if c.ACLDefault != "" && c.ACLDefault != ACLAllow && c.ACLDefault != ACLDeny {
		errs = append(errs, fmt.Errorf("kv: ACLDefault %q: want %q or %q", c.ACLDefault, ACLAllow, ACLDeny))
	}
	if c.RetryAfter < time.Second {
		errs = append(errs, fmt.Errorf("kv: RetryAfter %v must be >= 1s", c.RetryAfter))
	}
	return errors.Join(errs...)
}
