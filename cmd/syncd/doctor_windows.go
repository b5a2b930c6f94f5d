package main

// checkSocket: syncd serves no Unix socket on Windows.
func (d *doctor) checkSocket() {}
