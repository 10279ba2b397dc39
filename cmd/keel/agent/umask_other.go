//go:build !unix

package agent

func restrictUmask() int { return 0 }
