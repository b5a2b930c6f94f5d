// Package convergence is the convergence checker of issue 25: a test of
// record that runs several real `syncd run` daemons against a real
// `syncd server` (bbolt, or two PostgreSQL replicas sharing a database),
// drives seeded random writes through their local APIs while it cuts
// their network, SIGKILLs daemons and server replicas and lets the
// server sweep tombstones, and then checks the contract of DESIGN.md
// Part 3, "Convergence is the contract": once every device is online
// and quiet, every device holds exactly what the server holds, and every
// intent that could not be applied is visible as a conflict or a failed
// operation.
//
// TestConvergence runs that for each storage and conflict policy (lww,
// reject, merge); TestMerge (merge_test.go) plays field-level merge
// scenarios whose outcome is known exactly, with the same processes.
//
// The package holds only the tests and their helpers; it owns no code
// the daemon or the server uses. docs/convergence.md says what they
// check, how to run them and what they found.
package convergence
