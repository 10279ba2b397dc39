package api

import (
	"encoding/binary"
	"time"
	"unicode/utf8"
)

// Watches on the stream protocol: many watches share one connection with the
// requests, each named by the id of the frame that created it. The semantics are
// those of GET /v1/watch/{key} (see WatchEvent): events in revision order with no gap
// and no duplicate, a revision's events in one frame, progress notifications, an end
// frame with the last revision delivered (SlowWatcher, Restored) or the compact
// revision (ResourceExpired), a linearizable start unless serializable.
//
//	watch   = id op=4 flags key:bytes start_revision:uvarint progress_ms:uvarint
//	          flags: StreamFlagSerializable, StreamFlagPrefix, StreamFlagPrevKV,
//	          StreamFlagRequireLeader (only to a server offering StreamFeatureRequireLeader)
//	          (start_revision 0 = after the latest; progress_ms 0 = no progress frames)
//	cancel  = id op=5 flags=0 key:bytes (empty)   id: the watch's id
//
// Answers to a watch carry its id and op 4, in this order:
//
//	status 1 error:    code reason message      the watch was not created (400, 429, ...)
//	status 0 created:  revision                 the node's revision when the watch began
//	status 2 events:   revision count:uvarint event*   one revision's events, key order
//	         event  =  type:byte key:bytes kv [prev kv if type&0x80]
//	         kv     =  value:bytes create_revision mod_revision version lease (uvarints)
//	status 3 progress: revision                 every event up to revision has been sent
//	status 5 shared:   revision others:uvarint other_id:uvarint* count:uvarint event*
//	                   the events frame of several watches at once: the frame's id and
//	                   the others ids; sent only on a connection whose upgrade request
//	                   offered StreamFeatureSharedEvents
//	status 4 end:      revision compact_revision:uvarint reason:bytes message:bytes
//
// A revision fanned out to many watches of one connection (every informer of a
// resource watches the same prefix) is then one frame and one decoding, not one per
// watch: a connection of 1,000 watches of one prefix carries ~2 KB per revision
// instead of ~300 KB.
//
// An end frame is the watch's last: revision is the last revision whose events were
// all sent (resume from revision+1); reason is ReasonSlowWatcher, ReasonRestored,
// ReasonResourceExpired (with compact_revision; also at creation for a compacted
// start_revision) or ReasonCanceled (the answer to a cancel). A cancel of a watch
// that already ended is not answered. Type 1 is PUT, 2 DELETE.

// Watch operations.
const (
	StreamWatch       StreamOp = 4
	StreamWatchCancel StreamOp = 5
)

// Watch request flags (with StreamFlagSerializable).
const (
	// StreamFlagPrefix: the watch covers every key under the key (all keys when empty).
	StreamFlagPrefix = 1 << 2
	// StreamFlagPrevKV: events carry the key's previous version.
	StreamFlagPrevKV = 1 << 3
	// StreamFlagRequireLeader: the watch is refused (503 NoLeader) on a node without
	// leader contact, and ends with reason NoLeader when the node loses it, so that
	// the client resumes on a node that is not cut off (etcd's WithRequireLeader).
	StreamFlagRequireLeader = 1 << 5
)

// StreamFeatureRequireLeader is the feature a server lists in its upgrade answer when
// it takes StreamFlagRequireLeader (an older server refuses the flag with a 400).
const StreamFeatureRequireLeader = "require-leader"

// StreamWatchStatus says what a watch answer (op StreamWatch, Err nil) is.
type StreamWatchStatus byte

// Watch answer kinds (the status byte of the frame).
const (
	StreamWatchCreated  StreamWatchStatus = 0
	StreamWatchEvents   StreamWatchStatus = 2
	StreamWatchProgress StreamWatchStatus = 3
	StreamWatchEnd      StreamWatchStatus = 4
	// streamWatchShared is the wire status of an events frame with
	// StreamResponse.Shared; decoded, it is a StreamWatchEvents answer.
	streamWatchShared StreamWatchStatus = 5
)

// The upgrade request of a client that reads shared events frames (status 5) offers
// it in this header; a server sends them only then, so neither an older client nor an
// older server (which ignores the header) ever meets one.
const (
	HeaderStreamFeatures      = "Keel-Stream-Features"
	StreamFeatureSharedEvents = "shared-watch-events"
)

// maxSharedIDs bounds the watch ids of one shared frame on decoding (a frame of a
// connection's every watch; servers cap a connection's watches far lower).
const maxSharedIDs = 1 << 20

// ReasonCanceled (stream end frame): the client canceled the watch.
const ReasonCanceled = "Canceled"

// MaxStreamProgress bounds progress_ms on the wire; the server's own bounds are
// tighter.
const MaxStreamProgress = 24 * time.Hour

// StreamEvent is one event of a watch: Type EventPut or EventDelete.
type StreamEvent struct {
	Type   string
	KV     KV
	PrevKV *KV
}

const (
	eventPut     = 1
	eventDelete  = 2
	eventHasPrev = 0x80
)

// AppendStreamEvents appends the part of an events frame after its revision (count
// and events). A server encodes it once per revision and shares it between the
// watches it is sent to (AppendStreamWatchFrame).
func AppendStreamEvents(b []byte, evs []StreamEvent) []byte {
	b = binary.AppendUvarint(b, uint64(len(evs)))
	for i := range evs {
		ev := &evs[i]
		t := byte(eventPut)
		if ev.Type == EventDelete {
			t = eventDelete
		}
		if ev.PrevKV != nil {
			t |= eventHasPrev
		}
		b = append(b, t)
		b = appendBinBytes(b, []byte(ev.KV.Key))
		b = appendEventKV(b, &ev.KV)
		if ev.PrevKV != nil {
			b = appendEventKV(b, ev.PrevKV)
		}
	}
	return b
}

func appendEventKV(b []byte, kv *KV) []byte {
	b = appendBinBytes(b, kv.Value)
	b = binary.AppendUvarint(b, uint64(kv.CreateRevision))
	b = binary.AppendUvarint(b, uint64(kv.ModRevision))
	b = binary.AppendUvarint(b, uint64(kv.Version))
	return binary.AppendUvarint(b, uint64(kv.Lease))
}

// AppendStreamWatchFrame appends an events frame for watch id at revision rev whose
// count and events are payload (from AppendStreamEvents).
func AppendStreamWatchFrame(b []byte, id uint64, rev int64, payload []byte) []byte {
	n := uvarintLen(id) + 2 + uvarintLen(uint64(rev)) + len(payload)
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, id)
	b = append(b, byte(StreamWatch), byte(StreamWatchEvents))
	b = binary.AppendUvarint(b, uint64(rev))
	return append(b, payload...)
}

// AppendStreamSharedWatchFrame appends one events frame for every watch of ids (at
// least two; the first is the frame's id) at revision rev whose count and events are
// payload. Only for a connection that offered StreamFeatureSharedEvents.
func AppendStreamSharedWatchFrame(b []byte, ids []uint64, rev int64, payload []byte) []byte {
	n := uvarintLen(ids[0]) + 2 + uvarintLen(uint64(rev)) + uvarintLen(uint64(len(ids)-1)) + len(payload)
	for _, id := range ids[1:] {
		n += uvarintLen(id)
	}
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, ids[0])
	b = append(b, byte(StreamWatch), byte(streamWatchShared))
	b = binary.AppendUvarint(b, uint64(rev))
	b = binary.AppendUvarint(b, uint64(len(ids)-1))
	for _, id := range ids[1:] {
		b = binary.AppendUvarint(b, id)
	}
	return append(b, payload...)
}

// appendWatchResponse appends the body of a watch answer that is not an error.
func appendWatchResponse(b []byte, r *StreamResponse) []byte {
	b = binary.AppendUvarint(b, r.ID)
	status := r.Watch
	if status == StreamWatchEvents && len(r.Shared) > 0 {
		status = streamWatchShared
	}
	b = append(b, byte(StreamWatch), byte(status))
	b = binary.AppendUvarint(b, uint64(r.Revision))
	switch r.Watch {
	case StreamWatchEvents:
		if len(r.Shared) > 0 {
			b = binary.AppendUvarint(b, uint64(len(r.Shared)))
			for _, id := range r.Shared {
				b = binary.AppendUvarint(b, id)
			}
		}
		b = AppendStreamEvents(b, r.Events)
	case StreamWatchEnd:
		b = binary.AppendUvarint(b, uint64(r.CompactRevision))
		b = appendBinBytes(b, []byte(r.Reason))
		b = appendBinBytes(b, []byte(r.Message))
	}
	return b
}

// appendWatchRequest appends the args of a watch or cancel request.
func appendWatchRequest(b []byte, r *StreamRequest) []byte {
	if r.Op == StreamWatch {
		b = binary.AppendUvarint(b, uint64(r.Revision))
		b = binary.AppendUvarint(b, uint64(r.Progress/time.Millisecond))
	}
	return b
}

// decodeWatchRequest decodes the args of a watch or cancel request.
func decodeWatchRequest(d binDecoder, flags byte, r *StreamRequest) {
	if r.Op == StreamWatchCancel {
		if flags != 0 || len(r.Key) != 0 {
			d.Fail("a cancel has no flags and no key")
		}
		return
	}
	if flags&^(StreamFlagSerializable|StreamFlagPrefix|StreamFlagPrevKV|StreamFlagRequireLeader) != 0 {
		d.Fail("unknown watch flags %#x", flags)
		return
	}
	r.Serializable = flags&StreamFlagSerializable != 0
	r.Prefix = flags&StreamFlagPrefix != 0
	r.PrevKV = flags&StreamFlagPrevKV != 0
	r.RequireLeader = flags&StreamFlagRequireLeader != 0
	r.Revision = d.int("start_revision")
	ms := d.Uvarint("progress_ms")
	if ms > uint64(MaxStreamProgress/time.Millisecond) {
		d.Fail("progress_ms %d out of range", ms)
	}
	r.Progress = time.Duration(ms) * time.Millisecond
}

// decodeWatchResponse decodes a watch answer with status s (not an error).
func decodeWatchResponse(d binDecoder, s StreamWatchStatus, r *StreamResponse) {
	r.Watch = s
	r.Revision = d.int("revision")
	if s == streamWatchShared {
		r.Watch = StreamWatchEvents
		n := d.Uvarint("shared watch count")
		switch {
		case d.Err() != nil:
		case n == 0 || n > maxSharedIDs:
			d.Fail("shared watch count %d out of range", n)
		default:
			// An id takes at least a byte: n beyond that is a lie the loop stops at.
			r.Shared = make([]uint64, 0, min(n, uint64(d.Len())))
			for i := uint64(0); i < n && d.Err() == nil; i++ {
				r.Shared = append(r.Shared, d.Uvarint("shared watch id"))
			}
		}
	}
	switch r.Watch {
	case StreamWatchCreated, StreamWatchProgress:
	case StreamWatchEvents:
		n := d.Uvarint("event count")
		if n == 0 && d.Err() == nil {
			d.Fail("an events frame without events")
		}
		// An event takes at least 8 bytes: n beyond that is a lie the loop stops at.
		r.Events = make([]StreamEvent, 0, min(n, uint64(d.Len()/8)+1))
		for i := uint64(0); i < n && d.Err() == nil; i++ {
			r.Events = append(r.Events, decodeEvent(d))
		}
	case StreamWatchEnd:
		r.CompactRevision = d.int("compact_revision")
		reason, msg := d.Bytes("reason", noMax), d.Bytes("message", noMax)
		if d.Err() == nil && (!utf8.Valid(reason) || !utf8.Valid(msg)) {
			d.Fail("end reason or message is not UTF-8")
		}
		r.Reason, r.Message = string(reason), string(msg)
	default:
		d.Fail("unknown watch status %d", byte(s))
	}
}

func decodeEvent(d binDecoder) StreamEvent {
	var ev StreamEvent
	t := d.Uint8("event type")
	key := d.Bytes("key", noMax)
	switch {
	case d.Err() != nil:
		return ev
	case t&^eventHasPrev == eventPut:
		ev.Type = EventPut
	case t&^eventHasPrev == eventDelete:
		ev.Type = EventDelete
	default:
		d.Fail("unknown event type %#x", t)
		return ev
	}
	if !utf8.Valid(key) {
		d.Fail("event key is not UTF-8")
		return ev
	}
	ev.KV = decodeEventKV(d, string(key))
	if t&eventHasPrev != 0 {
		prev := decodeEventKV(d, ev.KV.Key)
		ev.PrevKV = &prev
	}
	return ev
}

func decodeEventKV(d binDecoder, key string) KV {
	v := d.Bytes("value", noMax)
	if v == nil {
		v = []byte{}
	}
	kv := KV{Key: key, Value: v[:len(v):len(v)]} // capped: an append never reaches the next event
	kv.CreateRevision, kv.ModRevision = d.int("create_revision"), d.int("mod_revision")
	kv.Version, kv.Lease = d.int("version"), d.int("lease")
	return kv
}
