package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// refreshEvery is how often the view polls the API server.
const refreshEvery = 500 * time.Millisecond

// commandResult is the answer to a command typed in the view.
type commandResult struct {
	command, out string
	err          error
}

// runView shows the live view until the user quits, ctx ends or the inner
// process stops. On a terminal it redraws in place and reads keys; otherwise
// it prints changes as lines and reads commands as lines from stdin.
func runView(ctx context.Context, opts options, inner *innerProcess) error {
	st, err := newState(opts.kubeconfig())
	if err != nil {
		return err
	}
	tty := !opts.plain && term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	var screen *screen
	if tty {
		screen, err = newScreen(opts)
		if err != nil {
			return err
		}
		defer screen.close()
	}
	commands := make(chan string)
	if !tty {
		go readLines(commands)
	}
	results := make(chan commandResult, 4)
	run := func(cmd string) {
		go func() {
			out, err := sendCommand(opts.socket(), cmd)
			results <- commandResult{command: cmd, out: strings.TrimRight(out, "\n"), err: err}
		}()
	}
	say := func(text string) {
		if screen != nil {
			screen.message = text
			return
		}
		fmt.Println(text)
	}
	ticker := time.NewTicker(refreshEvery)
	defer ticker.Stop()
	lines := inner.lines
	stopping := false // the inner process is stopping: the API server goes
	lastErr := ""
	var keys <-chan byte
	if screen != nil {
		keys = screen.keys
	}
	for {
		redraw := false
		select {
		case <-ctx.Done():
			return nil
		case <-inner.exited:
			if inner.err != nil {
				return inner.err
			}
			return nil
		case line, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			stopping = stopping || strings.HasPrefix(line, "stopping")
			say(">> " + line)
			redraw = true
		case <-ticker.C:
			if stopping {
				continue
			}
			for _, t := range st.refresh(ctx) {
				if screen == nil {
					fmt.Println(t)
				}
			}
			if screen == nil && st.err != nil && st.err.Error() != lastErr {
				fmt.Println(">> " + st.err.Error())
			}
			lastErr = ""
			if st.err != nil {
				lastErr = st.err.Error()
			}
			redraw = true
		case res := <-results:
			text := res.out
			if res.err != nil {
				text = strings.TrimSpace(text + "\nerror: " + res.err.Error())
			}
			say(fmt.Sprintf("> %s\n%s", res.command, text))
			redraw = true
		case cmd := <-commands:
			if quit := handleLocal(st, cmd, say); quit {
				return nil
			} else if strings.TrimSpace(cmd) != "" && !isLocal(cmd) {
				run(cmd)
			}
		case b := <-keys:
			if cmd, done, quit := screen.key(b); quit {
				return nil
			} else if done {
				if handleLocal(st, cmd, say) {
					return nil
				}
				if strings.TrimSpace(cmd) != "" && !isLocal(cmd) {
					screen.message = "> " + cmd + "\n(running)"
					run(cmd)
				}
			}
			redraw = true
		}
		if redraw && screen != nil {
			screen.draw(st)
		}
	}
}

// isLocal reports whether the view answers cmd itself.
func isLocal(cmd string) bool {
	switch strings.TrimSpace(cmd) {
	case "quit", "q", "exit", "stop", "show", "table":
		return true
	}
	return false
}

// handleLocal answers the commands of the view itself; it returns true to
// quit.
func handleLocal(st *state, cmd string, say func(string)) bool {
	switch strings.TrimSpace(cmd) {
	case "quit", "q", "exit", "stop":
		return true
	case "show", "table":
		say(strings.Join(st.table(), "\n"))
	}
	return false
}

// readLines sends stdin's lines; at the end of stdin it stops reading (a
// sandbox started with stdin closed keeps running until a signal).
func readLines(out chan<- string) {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		out <- sc.Text()
	}
}

// screen is the terminal in raw mode: the view is redrawn in place, keys
// edit a command line.
type screen struct {
	opts    options
	restore *term.State
	keys    chan byte
	input   []rune
	escape  int // 1 after ESC, 2 inside an escape sequence (arrow keys, ignored)
	message string
	started time.Time
}

func newScreen(opts options) (*screen, error) {
	old, err := term.MakeRaw(int(os.Stdin.Fd()))
	if err != nil {
		return nil, fmt.Errorf("setting the terminal up: %w", err)
	}
	s := &screen{opts: opts, restore: old, keys: make(chan byte, 64), started: time.Now(),
		message: "type a command and press Enter (help lists them); Ctrl-C or q stops the sandbox"}
	// The alternate screen keeps the shell's scrollback clean.
	fmt.Print("\x1b[?1049h\x1b[H\x1b[2J")
	go func() {
		r := bufio.NewReader(os.Stdin)
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			s.keys <- b
		}
	}()
	return s, nil
}

func (s *screen) close() {
	fmt.Print("\x1b[?1049l")
	_ = term.Restore(int(os.Stdin.Fd()), s.restore)
}

// key edits the command line; it returns the command on Enter, and quit on
// Ctrl-C, or Ctrl-D on an empty line.
func (s *screen) key(b byte) (cmd string, done, quit bool) {
	switch s.escape {
	case 1: // after ESC: a sequence starts with [ or O; ESC alone clears
		s.escape = 0
		if b == '[' || b == 'O' {
			s.escape = 2
			return "", false, false
		}
		s.input = s.input[:0]
	case 2: // inside a sequence, up to its final byte
		if b >= 0x40 && b <= 0x7e {
			s.escape = 0
		}
		return "", false, false
	}
	switch {
	case b == 3: // Ctrl-C
		return "", false, true
	case b == 4 && len(s.input) == 0: // Ctrl-D
		return "", false, true
	case b == '\r' || b == '\n':
		cmd = string(s.input)
		s.input = s.input[:0]
		return cmd, true, false
	case b == 127 || b == 8:
		if len(s.input) > 0 {
			s.input = s.input[:len(s.input)-1]
		}
	case b == 21: // Ctrl-U
		s.input = s.input[:0]
	case b == 27:
		s.escape = 1
	case b >= 32 && b < 127:
		s.input = append(s.input, rune(b))
	}
	return "", false, false
}

// draw redraws the whole view in place.
func (s *screen) draw(st *state) {
	width, height, err := term.GetSize(int(os.Stdout.Fd()))
	if err != nil || width < 20 {
		width, height = 120, 40
	}
	var lines []string
	lines = append(lines, fmt.Sprintf("swh sandbox   %s   kubectl: export KUBECONFIG=%s", time.Now().Format("15:04:05"), s.opts.kubeconfig()))
	lines = append(lines, "nodes: "+strings.Join(st.nodes, "  "))
	if st.err != nil {
		lines = append(lines, "!! "+st.err.Error())
	}
	lines = append(lines, "")
	lines = append(lines, st.table()...)
	lines = append(lines, "", "RECENT TRANSITIONS")
	var trans []string
	for _, t := range st.transitions {
		trans = append(trans, "  "+t.String())
	}
	if len(trans) == 0 {
		trans = []string{"  (none yet)"}
	}
	msg := strings.Split(s.message, "\n")
	footer := append([]string{""}, msg...)
	footer = append(footer, "", "> "+string(s.input)+"_")
	// Keep the footer visible: drop the oldest transitions first.
	if room := height - len(lines) - len(footer) - 1; room < len(trans) && room >= 0 {
		trans = trans[len(trans)-room:]
	}
	lines = append(lines, trans...)
	lines = append(lines, footer...)
	if len(lines) > height-1 {
		lines = lines[:height-1]
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(truncate(l, width-1))
		b.WriteString("\x1b[K")
	}
	b.WriteString("\x1b[J")
	fmt.Print(b.String())
}

// truncate cuts s to at most n characters.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}
