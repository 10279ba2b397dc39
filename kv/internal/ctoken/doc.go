// Package ctoken is the continue-token codec: the opaque ?continue= string of a paged
// list, sealed (or, for older releases, signed) with keys derived from the replicated
// cluster secret.
//
// It owns the token's wire formats (written down byte by byte in token.go, with their
// compatibility rule) and the two checks every door relies on: Decode accepts only
// the one encoding of a token this cluster issued, and Token.CheckRange only a token
// used with the range it was issued for. Every refusal wraps ErrInvalid.
//
// ctoken never reads the store and never decides which format to issue: package kv
// picks the version (Server.tokenVersion, from what every voter reads) and keeps the
// node's Codec. A Codec is safe for concurrent use.
package ctoken
