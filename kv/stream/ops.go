package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// do runs one request: one call of the core, for the connection's caller with the
// rights it holds now.
func (c *streamConn) do(req *api.StreamRequest) api.StreamResponse {
	d := c.d
	resp := api.StreamResponse{ID: req.ID, Op: req.Op}
	ctx, cancel := context.WithTimeout(c.ctx, d.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	err := d.core.CheckClientCert(c.peer)
	var caller kv.Caller
	if err == nil {
		caller, err = d.core.Refresh(c.caller)
	}
	if err == nil {
		err = d.op(ctx, caller, req, &resp)
	}
	if err != nil {
		e := kv.WireError(err, req.Op != api.StreamGet)
		if e.Code == http.StatusInternalServerError {
			d.core.Logger().Error("stream request failed", "op", req.Op.String(), "error", err)
		}
		resp.Err = &e
	}
	if d.observe.Load() {
		code := http.StatusOK
		if resp.Err != nil {
			code = resp.Err.Code
		}
		d.metrics.observe(req.Op, code, time.Since(start))
	}
	return resp
}

func (d *Door) op(ctx context.Context, c kv.Caller, req *api.StreamRequest, resp *api.StreamResponse) error {
	switch req.Op {
	case api.StreamTxn:
		return d.txn(ctx, c, req, resp)
	case api.StreamLeaseGrant:
		id, err := d.core.LeaseGrant(ctx, c, req.LeaseID, int64(req.TTL/time.Second))
		resp.LeaseID, resp.TTL = id, req.TTL
		return err
	case api.StreamLeaseKeepAlive:
		left, err := d.core.LeaseKeepAlive(ctx, c, req.LeaseID)
		resp.LeaseID, resp.TTL = req.LeaseID, left
		return err
	case api.StreamLeaseRevoke:
		r, err := d.core.LeaseRevoke(ctx, c, req.LeaseID)
		resp.Revision, resp.Deleted = r.Revision, r.Deleted
		return err
	}
	key := string(req.Key)
	if err := d.core.CheckKey(key); err != nil {
		return err
	}
	switch req.Op {
	case api.StreamGet:
		cons := fsm.Linearizable
		if req.Serializable {
			cons = fsm.Serializable
		}
		kvv, rev, err := d.core.Get(ctx, c, key, req.Revision, cons)
		if err != nil {
			return err
		}
		resp.Revision, resp.KV = rev, kv.APIKV(kvv)
	case api.StreamPut:
		prev := int64(-1)
		if req.HasPrev {
			prev = req.PrevRevision
		}
		rev, err := d.core.Put(ctx, c, key, req.Value, prev, req.LeaseID)
		if err != nil {
			return err
		}
		resp.Revision = rev
	case api.StreamDelete:
		return d.delete(ctx, c, key, req, resp)
	}
	return nil
}

func (d *Door) delete(ctx context.Context, c kv.Caller, key string, req *api.StreamRequest, resp *api.StreamResponse) error {
	prev := int64(-1) // no guard; the core says which guards a delete takes
	if req.HasPrev {
		prev = req.PrevRevision
	}
	r, err := d.core.Delete(ctx, c, key, false, prev)
	if err != nil {
		return err
	}
	resp.Revision, resp.Deleted = r.Revision, r.Deleted
	return nil
}

// txn runs a transaction sent over the stream: the body and the answer of POST
// /v1/txn. An answer too large for a frame (ranged gets of many large values) is
// refused with a 413 when the transaction only read (the client asks again over
// HTTP); a transaction that wrote says at which revision it was applied.
func (d *Door) txn(ctx context.Context, c kv.Caller, req *api.StreamRequest, resp *api.StreamResponse) error {
	txn, err := d.core.DecodeTxn(req.Value)
	if err != nil {
		return fmt.Errorf("txn: %w", err)
	}
	res, err := d.core.Txn(ctx, c, txn, kv.TxnOptions{})
	if err != nil {
		return fmt.Errorf("txn: %w", err)
	}
	body, err := json.Marshal(kv.TxnResponse(res))
	if err != nil {
		return fmt.Errorf("txn answer: %w", err)
	}
	if len(body) > api.MaxStreamFrame-64 {
		if !txnWrites(txn) {
			return fmt.Errorf("%w: the answer of %d bytes does not fit a stream frame: ask over HTTP", kv.ErrTooLarge, len(body))
		}
		return fmt.Errorf("txn applied at revision %d, but its answer of %d bytes does not fit a stream frame",
			res.Revision, len(body))
	}
	resp.Revision, resp.Body = res.Revision, body
	return nil
}

// txnWrites reports whether txn has an op that may change state.
func txnWrites(txn *fsm.Txn) bool {
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, op := range ops {
			if op.Type != fsm.OpGet {
				return true
			}
		}
	}
	return false
}
