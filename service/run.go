package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	ks "github.com/kardianos/service"
)

// DefaultStopTimeout is how long Run waits for the program to return
// after the service manager asked it to stop.
const DefaultStopTimeout = 9 * time.Second

// RunConfig configures Run.
type RunConfig struct {
	// Name is the service's name; the Windows service control manager
	// hands control to the process by it. Default DefaultName.
	Name string
	// StopTimeout bounds the wait for the program to return once asked to
	// stop (default DefaultStopTimeout). Keep it above the program's own
	// graceful-stop deadline and below the service manager's (SysV's
	// init script waits 10 seconds, systemd 90).
	StopTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Interactive reports whether the process runs in the foreground
	// rather than under a service manager. Default:
	// kardianos/service's Interactive. A test seam.
	Interactive func() bool
}

// Interactive reports whether this process runs in the foreground (a
// terminal, a container, a SysV init script) rather than under a service
// manager that talks to it (systemd, launchd, the Windows service
// control manager).
func Interactive() bool { return ks.Interactive() }

// Run runs program until it returns or ctx ends, and returns its error.
//
// In the foreground Run is program(ctx). Under a service manager it
// hands control to kardianos/service: the service's Start runs program
// in a goroutine and returns at once; a stop request (or ctx ending, as
// on SIGTERM) cancels program's context and waits up to StopTimeout for
// it to return (ErrStopTimeout if it does not). When program returns by
// itself (a failed start) the service stops with its error. On Windows,
// where the service control manager owns the process, that ends the
// process with exit status 1 after logging the error.
func Run(ctx context.Context, cfg RunConfig, program func(context.Context) error) error {
	interactive := cfg.Interactive
	if interactive == nil {
		interactive = Interactive
	}
	if interactive() {
		return program(ctx)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &runner{
		parent:  ctx,
		program: program,
		timeout: cfg.StopTimeout,
		logger:  logger,
		done:    make(chan struct{}),
	}
	if p.timeout <= 0 {
		p.timeout = DefaultStopTimeout
	}
	name := cfg.Name
	if name == "" {
		name = DefaultName
	}
	s, err := ks.New(p, &ks.Config{
		Name: name,
		Option: ks.KeyValue{
			// Instead of kardianos's own SIGTERM wait: ctx ends on the
			// signals main listens for, and a program that gave up must
			// end the service too.
			"RunWait": func() {
				select {
				case <-ctx.Done():
				case <-p.done:
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := s.Run(); err != nil {
		return err
	}
	return p.result()
}

// runner is the kardianos Interface around the program.
type runner struct {
	parent  context.Context
	program func(context.Context) error
	timeout time.Duration
	logger  *slog.Logger

	mu       sync.Mutex
	cancel   context.CancelFunc
	stopping bool
	err      error
	done     chan struct{} // closed when program returned
}

// Start runs the program in a goroutine and returns at once.
func (p *runner) Start(ks.Service) error {
	ctx, cancel := context.WithCancel(p.parent)
	p.mu.Lock()
	p.cancel = cancel
	p.mu.Unlock()
	go func() {
		err := p.program(ctx)
		p.mu.Lock()
		p.err = err
		stopping := p.stopping
		p.mu.Unlock()
		close(p.done)
		if !stopping && runtime.GOOS == "windows" {
			// The service control manager only lets go of the process
			// through Stop; a program that ended by itself ends it.
			p.logger.Error("syncd stopped by itself", "err", err)
			os.Exit(1)
		}
	}()
	return nil
}

// Stop cancels the program and waits for it, up to the timeout.
func (p *runner) Stop(ks.Service) error {
	p.mu.Lock()
	p.stopping = true
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("%w: still running %s after the stop request", ErrStopTimeout, p.timeout)
	}
}

func (p *runner) result() error {
	select {
	case <-p.done:
	default:
		return nil // Stop timed out and reported it
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
