// Package logging builds keel's loggers (hclog): text or JSON lines, every line of a
// component carrying the node and the component, and a filter that keeps
// hashicorp/raft's routine events out of ERROR — an operator grepping ERROR finds only
// what needs action. It never decides what a component logs, only how the line is
// shaped and at which level a known routine event lands.
package logging
