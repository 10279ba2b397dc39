// Package differential is judge 4 of keel's etcd door.
package differential
