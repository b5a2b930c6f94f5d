package daemon

// runChild is replaced by the crash tests' child entry point.
func runChild() bool { return false }
