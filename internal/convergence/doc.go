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
// The package holds only the test (convergence_test.go and its helpers);
// it owns no code the daemon or the server uses. docs/convergence.md
// says what it checks, how to run it and what it found.
package convergence
