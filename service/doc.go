// Package service installs, controls and runs syncd as an OS service
// through github.com/kardianos/service: systemd units, SysV init scripts,
// launchd daemons and agents, Windows services.
//
// A Manager installs, uninstalls, starts, stops and reports the status
// of one named service, and smooths over what kardianos/service v1.3.0
// leaves rough: its SysV backend reports a stopped service as an error
// and its uninstall leaves the /etc/rc?.d links, the pid file and the
// log files behind; Manager.Status answers running, stopped or not
// installed, and Manager.Uninstall stops the service first and removes
// everything the install and the init script created.
//
// Run runs a program (the daemon, as a func(ctx) error) in the
// foreground or under the service manager. The package holds no daemon
// logic: it never sees the queue, the daemon or the local API.
package service
