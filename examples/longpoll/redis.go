package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisStore is a store that servers share through Redis. Each key is a
// hash of two fields, version and value, under "longpoll:" and the key's
// name. A put changes both and publishes the change on the channel
// "longpoll", to which every server's listen subscribes, in one script:
// a version never exists without its value, nor a change without its
// announcement.
type redisStore struct {
	client *redis.Client
	addr   string
	id     string // in each change it announces, so that its own listen skips them
	opt    redisOptions
}

// redisOptions tune a redisStore; a zero field takes its default.
type redisOptions struct {
	// health is how long the subscription may be silent before it is
	// pinged, and how long the ping may go unanswered before the
	// subscription is taken for dead, dropped and made again: a server
	// stops hearing for at most twice this before it knows.
	health time.Duration
	// timeout bounds each command.
	timeout time.Duration
}

const (
	redisPrefix         = "longpoll:" // of each key's hash
	redisChannel        = "longpoll"  // where puts are announced
	defaultHealth       = 5 * time.Second
	defaultRedisTimeout = time.Second
)

// newRedisStore returns a store on the Redis server at addr. A command
// that fails is not retried: a put whose reply was lost may have been
// made, and retrying it would make it twice; the client that gets its 503
// decides. Nor is a dial, so that while Redis is down a poll or a notify
// is refused at once rather than after go-redis's five tries.
func newRedisStore(addr string, o redisOptions) *redisStore {
	o.health = cmp.Or(o.health, defaultHealth)
	o.timeout = cmp.Or(o.timeout, defaultRedisTimeout)
	return &redisStore{addr: addr, id: rand.Text(), opt: o, client: redis.NewClient(&redis.Options{
		Addr:                     addr,
		MaxRetries:               -1,
		DialerRetries:            1,
		DialTimeout:              o.timeout,
		ReadTimeout:              o.timeout,
		WriteTimeout:             o.timeout,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})}
}

func (r *redisStore) String() string { return "redis at " + r.addr }

// named says which Redis an error came from.
func (r *redisStore) named(err error) error { return fmt.Errorf("%v: %w", r, err) }

// putScript bumps the version, stores the value and announces both. The
// message is
// "ORIGIN VERSION KEYLEN KEYVALUE": the key's length in bytes tells where
// the value starts, so neither needs escaping.
var putScript = redis.NewScript(`
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'value', ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. v .. ' ' .. #ARGV[1] .. ' ' .. ARGV[1] .. ARGV[2])
return v
`)

// put's server checks its own polls when put returns (server.notify),
// so the change is announced to the others only: its own listen skips it.
func (r *redisStore) put(ctx context.Context, key, value string) (*entry, error) {
	v, err := putScript.Run(ctx, r.client, []string{redisPrefix + key}, key, value, redisChannel, r.id).Uint64()
	if err != nil {
		return nil, r.named(err)
	}
	return &entry{Version: v, Value: value}, nil
}

func (r *redisStore) get(ctx context.Context, keys ...string) ([]*entry, error) {
	pipe := r.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, key := range keys {
		cmds[i] = pipe.HMGet(ctx, redisPrefix+key, "version", "value")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, r.named(err)
	}
	es := make([]*entry, len(keys))
	for i, cmd := range cmds {
		es[i] = noEntry
		vals := cmd.Val()
		if s, ok := vals[0].(string); ok {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, r.named(err)
			}
			value, _ := vals[1].(string)
			es[i] = &entry{Version: v, Value: value}
		}
	}
	return es, nil
}

// listen subscribes to the channel on a goroutine of its own, until stop
// is called. Each confirmation of the subscription, the first one
// included, is an up: changes made before it may have been missed.
//
// A subscription can die without a word: a NAT or a load balancer that
// drops the flow leaves this side's connection open and silent for ever.
// So a silence of opt.health is answered with a ping, and a ping not
// answered within as long with a new subscription on a new connection,
// the listener told it was lost meanwhile.
func (r *redisStore) listen(l listener) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex // guards ps, which stop closes to end a Receive
	var ps *redis.PubSub
	subscribe := func() *redis.PubSub {
		mu.Lock()
		defer mu.Unlock()
		if ps != nil {
			ps.Close()
		}
		if ctx.Err() == nil {
			ps = r.client.Subscribe(ctx, redisChannel)
		}
		return ps
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		p := subscribe()
		pinged := false
		for ctx.Err() == nil {
			msg, err := p.ReceiveTimeout(ctx, r.opt.health)
			var ne net.Error
			switch timeout := errors.As(err, &ne) && ne.Timeout(); {
			case ctx.Err() != nil:
				return
			case timeout && !pinged:
				// Silence: a quiet channel, or a dead connection. Ask.
				if err = p.Ping(ctx); err == nil {
					pinged = true
					continue
				}
				fallthrough
			case err != nil:
				if errors.As(err, &ne) && ne.Timeout() {
					err = fmt.Errorf("no answer to a ping within %v", r.opt.health)
				}
				l.lost(r.named(err))
				pinged = false
				sleep(ctx, 100*time.Millisecond)
				p = subscribe() // on a new connection, whatever became of the old one
				continue
			}
			pinged = false
			switch m := msg.(type) {
			case *redis.Subscription:
				// Messages wait in the connection while up reads the keys.
				if err := l.up(ctx); err != nil {
					// Subscribed but unable to read: start again.
					l.lost(r.named(err))
					sleep(ctx, 100*time.Millisecond)
					p = subscribe()
				}
			case *redis.Message:
				if origin, key, e, err := parseChange(m.Payload); err == nil && origin != r.id {
					l.changed(key, e)
				}
			}
		}
	})
	return func() {
		cancel()
		mu.Lock()
		if ps != nil {
			ps.Close() // ends a Receive waiting for a message
		}
		mu.Unlock()
		wg.Wait()
	}
}

// parseChange reads a message of putScript.
func parseChange(msg string) (origin, key string, e *entry, err error) {
	origin, rest, ok1 := strings.Cut(msg, " ")
	version, rest, ok2 := strings.Cut(rest, " ")
	keyLen, rest, ok3 := strings.Cut(rest, " ")
	v, err1 := strconv.ParseUint(version, 10, 64)
	n, err2 := strconv.Atoi(keyLen)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || n < 0 || n > len(rest) {
		return "", "", nil, errors.New("longpoll: malformed change: " + msg)
	}
	return origin, rest[:n], &entry{Version: v, Value: rest[n:]}, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
