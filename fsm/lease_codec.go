package fsm

import "encoding/binary"

// Lease commands in CommandFormatV3, after the format and type bytes:
//
//	CmdLeaseGrant       id:varint ttlMillis:varint
//	CmdLeaseRevoke      n:uvarint { id:varint }×n
//	CmdLeaseCheckpoint  n:uvarint { id:varint remainingMillis:varint }×n
//
// and in a V3 transaction every op ends with lease:varint (0 = none), after V2's
// encoding tag. Values are checked when applied, not when decoded (a negative TTL
// decodes and is refused by the state machine as ErrInvalidCommand), so every node
// refuses the same entries the same way. A lease command in format 1 or 2 is corrupt.

func isLeaseCommand(t CommandType) bool {
	return t == CmdLeaseGrant || t == CmdLeaseRevoke || t == CmdLeaseCheckpoint
}

func appendLeaseCommand(b []byte, cmd *Command) []byte {
	switch cmd.Type {
	case CmdLeaseGrant:
		b = binary.AppendVarint(b, cmd.LeaseID)
		b = binary.AppendVarint(b, cmd.LeaseTTL)
	case CmdLeaseRevoke:
		b = binary.AppendUvarint(b, uint64(len(cmd.LeaseIDs)))
		for _, id := range cmd.LeaseIDs {
			b = binary.AppendVarint(b, id)
		}
	case CmdLeaseCheckpoint:
		b = binary.AppendUvarint(b, uint64(len(cmd.Checkpoints)))
		for _, cp := range cmd.Checkpoints {
			b = binary.AppendVarint(b, cp.ID)
			b = binary.AppendVarint(b, cp.Remaining)
		}
	}
	return b
}

func (d decoder) leaseCommand(cmd *Command) {
	switch cmd.Type {
	case CmdLeaseGrant:
		cmd.LeaseID = d.Varint("lease id")
		cmd.LeaseTTL = d.Varint("lease ttl")
	case CmdLeaseRevoke:
		if n := d.Count("lease ids", 1); n > 0 {
			cmd.LeaseIDs = make([]int64, n)
			for i := range cmd.LeaseIDs {
				cmd.LeaseIDs[i] = d.Varint("lease id")
			}
		}
	case CmdLeaseCheckpoint:
		if n := d.Count("checkpoints", 2); n > 0 {
			cmd.Checkpoints = make([]LeaseCheckpoint, n)
			for i := range cmd.Checkpoints {
				cmd.Checkpoints[i] = LeaseCheckpoint{ID: d.Varint("lease id"), Remaining: d.Varint("remaining")}
			}
		}
	}
}
