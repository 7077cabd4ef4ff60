// The Go peer of `weft bench runtime` and `weft bench ipc` (bench/gopeer.rs builds it at bench time with the
// local `go`, stdlib only, and keeps one process running so the Go runtime stays warm).
//
// Protocol: one request per line on stdin, "<test> <n>"; one reply per line on stdout:
// the nanoseconds the timed loop took, or "error: <why>".
//
//	spawn n     n times: go func(){ wg.Done() }() + wg.Wait() (default GOMAXPROCS)
//	yield n     two goroutines doing n runtime.Gosched() each, GOMAXPROCS=1
//	pingpong n   n round trips through two unbuffered channels, GOMAXPROCS=2
//	pingpong1 n  the same with GOMAXPROCS=1 (both goroutines on one P: a local round trip)
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

func spawn(n int) time.Duration {
	var wg sync.WaitGroup
	t := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { wg.Done() }()
		wg.Wait()
	}
	return time.Since(t)
}

func yield(n int) time.Duration {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var wg sync.WaitGroup
	wg.Add(1)
	t := time.Now()
	go func() {
		for i := 0; i < n; i++ {
			runtime.Gosched()
		}
		wg.Done()
	}()
	for i := 0; i < n; i++ {
		runtime.Gosched()
	}
	wg.Wait()
	return time.Since(t)
}

func pingpong(n int, procs int) time.Duration {
	prev := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(prev)
	ping := make(chan int)
	pong := make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	t := time.Now()
	for i := 0; i < n; i++ {
		ping <- i
		<-pong
	}
	d := time.Since(t)
	close(ping)
	<-pong
	return d
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 2 {
			fmt.Println("error: expected \"<test> <n>\"")
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			fmt.Println("error: bad count", f[1])
			continue
		}
		var d time.Duration
		switch f[0] {
		case "spawn":
			d = spawn(n)
		case "yield":
			d = yield(n)
		case "pingpong":
			d = pingpong(n, 2)
		case "pingpong1":
			d = pingpong(n, 1)
		default:
			fmt.Println("error: unknown test", f[0])
			continue
		}
		fmt.Println(d.Nanoseconds())
	}
}
