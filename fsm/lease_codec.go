package fsm

import "encoding/binary"

// Lease commands in CommandFormatV3, after the format and type bytes:
//
//	CmdLeaseGrant       id:varint ttlMillis:varint
//	CmdLeaseRevoke      n:uvarint { id:varint }×n
//	CmdLeaseCheckpoint  n:uvarint { id:varint remainingMillis:varint }×n
//
// CommandFormatV5 adds the owner of a grant (Command.LeaseOwner, non-empty; a grant
// without owner is still written in V3, byte for byte as before):
//
//	CmdLeaseGrant       id:varint ttlMillis:varint owner:bytes (uvarint length, then the bytes)
//
// For example {LeaseID: 7, LeaseTTL: 10000, LeaseOwner: "p:a"} is
//
//	05 04 0e a0 9c 01 03 70 3a 61
//	V5 grant id=7 ttl=10000 len=3 "p:a"
//
// Every other command reads in V5 as in V4 (no release writes one so). A V5 grant
// with an empty owner is corrupt: each command has one encoding.
//
// and in a V3 transaction every op ends with lease:varint (0 = none), after V2's
// encoding tag. Values are checked when applied, not when decoded (a negative TTL
// decodes and is refused by the state machine as ErrInvalidCommand), so every node
// refuses the same entries the same way. A lease command in format 1 or 2 is corrupt.

func isLeaseCommand(t CommandType) bool {
	return t == CmdLeaseGrant || t == CmdLeaseRevoke || t == CmdLeaseCheckpoint
}

func appendLeaseCommand(b []byte, cmd *Command, format byte) []byte {
	switch cmd.Type {
	case CmdLeaseGrant:
		b = binary.AppendVarint(b, cmd.LeaseID)
		b = binary.AppendVarint(b, cmd.LeaseTTL)
		if format >= CommandFormatV5 {
			b = appendBytes(b, []byte(cmd.LeaseOwner))
		}
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

func (d decoder) leaseCommand(cmd *Command, format byte) {
	switch cmd.Type {
	case CmdLeaseGrant:
		cmd.LeaseID = d.Varint("lease id")
		cmd.LeaseTTL = d.Varint("lease ttl")
		if format >= CommandFormatV5 {
			cmd.LeaseOwner = string(d.Bytes("lease owner", noMax))
			if cmd.LeaseOwner == "" && d.Err() == nil {
				d.Fail("lease grant in format %d without owner", format)
			}
		}
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
