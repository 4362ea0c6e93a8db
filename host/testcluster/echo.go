package testcluster

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// echoRuntime is the container runtime behind a Kubelet's streaming server: every container is an
// EchoContainer.
type echoRuntime struct{ k *Kubelet }

// Exec runs cmd with runCommand; a non-zero exit code reaches the client as the command's, as a
// runtime reports a process's exit status.
func (e echoRuntime) Exec(_ context.Context, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	if code := runCommand(cmd, in, writerOrDiscard(out), stderrWriter(out, errOut)); code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command %q exited with code %d", cmd, code), Code: code}
	}
	return nil
}

// Attach connects to the container's main process, which echoes its standard input. Without
// standard input it runs until the client or the kubelet goes away.
func (e echoRuntime) Attach(ctx context.Context, _ string, in io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	if in == nil {
		select {
		case <-ctx.Done():
		case <-e.k.closed:
		}
		return nil
	}
	_, err := io.Copy(writerOrDiscard(out), in)
	return err
}

// PortForward echoes what the client sends to EchoPort until the client closes its side; other
// ports have no listener.
func (e echoRuntime) PortForward(_ context.Context, _ string, port int32, stream io.ReadWriteCloser) error {
	if port != EchoPort {
		return fmt.Errorf("failed to connect to localhost:%d inside the pod: connection refused", port)
	}
	_, err := io.Copy(stream, stream)
	return err
}

func writerOrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// stderrWriter is where a command's standard error goes: with a terminal (no stderr stream) it
// shares standard output, as on a real terminal.
func stderrWriter(out, errOut io.Writer) io.Writer {
	if errOut == nil {
		return writerOrDiscard(out)
	}
	return errOut
}

// runCommand runs the echo container's tiny command language and returns the exit code:
//
//	cat                copies standard input to standard output
//	echo WORD...       writes the words and a newline to standard output
//	echo WORD... >&2   the same to standard error
//	exit N             ends with code N
//	sh -c SCRIPT       runs SCRIPT's ";"-separated commands in turn (words split on blanks)
//
// Anything else is "not found", code 127, as sh reports it.
func runCommand(cmd []string, in io.Reader, stdout, stderr io.Writer) int {
	if len(cmd) == 3 && cmd[0] == "sh" && cmd[1] == "-c" {
		for _, statement := range strings.Split(cmd[2], ";") {
			if words := strings.Fields(statement); len(words) > 0 {
				if code, exited := runStatement(words, in, stdout, stderr); exited {
					return code
				}
			}
		}
		return 0
	}
	if len(cmd) == 0 {
		fmt.Fprintln(stderr, "no command given")
		return 127
	}
	code, _ := runStatement(cmd, in, stdout, stderr)
	return code
}

// runStatement runs one command; exited reports that it ends the script (exit).
func runStatement(words []string, in io.Reader, stdout, stderr io.Writer) (code int, exited bool) {
	switch name, args := words[0], words[1:]; {
	case name == "cat" && len(args) == 0:
		if in != nil {
			_, _ = io.Copy(stdout, in)
		}
		return 0, false
	case name == "echo":
		w := stdout
		if len(args) > 0 && args[len(args)-1] == ">&2" {
			w, args = stderr, args[:len(args)-1]
		}
		fmt.Fprintln(w, strings.Join(args, " "))
		return 0, false
	case name == "exit" && len(args) == 1:
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 || n > 255 {
			fmt.Fprintf(stderr, "sh: exit: illegal number: %s\n", args[0])
			return 2, true
		}
		return n, true
	default:
		fmt.Fprintf(stderr, "sh: %s: not found\n", name)
		return 127, false
	}
}
