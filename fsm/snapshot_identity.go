package fsm

// WithIdentity returns a copy of the snapshot that carries clusterID and secret in
// place of the store's own (a nil secret: none). A snapshot saved for a user leaves the
// secret out (the secret keys continue tokens and the saved file's MAC; the file's
// holder must not get it), and a restore writes the restoring cluster's own ID and
// secret back in, so that a restore replaces the data, never the cluster's identity.
// The stream format is unchanged.
func (sn *Snapshot) WithIdentity(clusterID string, secret []byte) *Snapshot {
	st := sn.st
	st.clusterID = clusterID
	st.secret = secret
	return &Snapshot{st: st}
}

// ClusterID is the cluster ID the snapshot carries.
func (sn *Snapshot) ClusterID() string { return sn.st.clusterID }
