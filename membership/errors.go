package membership

import "errors"

// Sentinel errors. Match them with errors.Is; the wrapped message says which value or
// peer was at fault.
var (
	// ErrInvalidConfig is returned by Config.Validate (and Open) for a bad setting.
	ErrInvalidConfig = errors.New("membership: invalid config")
	// ErrInvalidMeta is returned for node metadata that breaks a rule of Meta.Validate.
	ErrInvalidMeta = errors.New("membership: invalid node metadata")
	// ErrMetaTooLarge is returned when encoded metadata would exceed MetaMaxSize bytes.
	ErrMetaTooLarge = errors.New("membership: node metadata too large")
	// ErrMetaCorrupt is returned when metadata bytes cannot be decoded.
	ErrMetaCorrupt = errors.New("membership: corrupt node metadata")
	// ErrUnknownMetaFormat is returned for metadata written in a format version whose
	// framing this release cannot read (a future incompatible format).
	ErrUnknownMetaFormat = errors.New("membership: unknown node metadata format")
	// ErrForeignCluster is returned when a peer announces another cluster label.
	ErrForeignCluster = errors.New("membership: peer belongs to another cluster")
	// ErrJoin is returned when no address of a join attempt could be reached.
	ErrJoin = errors.New("membership: join failed")
	// ErrBroadcastTimeout means a metadata update or leave was applied locally but was
	// not confirmed sent to the cluster before the deadline; it still spreads through
	// the periodic full state syncs.
	ErrBroadcastTimeout = errors.New("membership: broadcast not confirmed before deadline")
	// ErrLeft is returned by operations that need a member that has not left.
	ErrLeft = errors.New("membership: local node has left the cluster")
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("membership: closed")
)
