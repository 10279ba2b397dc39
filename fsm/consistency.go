package fsm

// Consistency is what a read promises. The replication layer keeps the promise (package
// raft waits for a read index before a linearizable read); the store only serves views.
type Consistency int

const (
	// Linearizable reads reflect every write acknowledged before the read began.
	Linearizable Consistency = iota
	// Serializable reads return the local state: possibly stale, never torn.
	Serializable
)

func (c Consistency) String() string {
	if c == Serializable {
		return "serializable"
	}
	return "linearizable"
}
