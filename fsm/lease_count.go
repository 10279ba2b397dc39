package fsm

// LeaseCount is the number of live leases in the view.
func (v *View) LeaseCount() int { return v.st.ls.leases.Len() }
