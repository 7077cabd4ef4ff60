//! What COMMAND DOCS says of each command and subcommand: a one-line summary of what
//! it does in weft-kv, the Redis version that introduced it, its group and its cost.

/// One command's documentation.
#[derive(Clone, Copy, Debug)]
pub struct Doc {
    /// What it does, in one line.
    pub summary: &'static str,
    /// The Redis version that introduced it.
    pub since: &'static str,
    /// Redis's group: string, hash, generic, connection, server, scripting.
    pub group: &'static str,
    /// How its cost grows.
    pub complexity: &'static str,
}

const fn d(
    summary: &'static str,
    since: &'static str,
    group: &'static str,
    complexity: &'static str,
) -> Doc {
    Doc {
        summary,
        since,
        group,
        complexity,
    }
}

const O1: &str = "O(1)";
const SORT_N: &str =
    "O(N+M*log(M)) where N is the number of elements to sort and M the number answered";
const KEYS: &str = "O(N) where N is the number of keys given";
const ALL: &str = "O(N) where N is the number of keys in the store";
const CLIENTS: &str = "O(N) where N is the number of connections";
const SUBS: &str = "Depends on the subcommand";
const FIELDS: &str = "O(N) where N is the number of fields given";
const HASH: &str = "O(N) where N is the number of fields of the hash";
const NONE: &str = "Not supported by weft-kv";
const SET: &str = "set";
const MEMBERS: &str = "O(N) where N is the number of members given or asked for";
const SET_N: &str = "O(N) where N is the number of members of the set";
const SETS: &str = "O(N) where N is the number of members of the sets";
const CHANNELS: &str = "O(N) where N is the number of channels or patterns given";
const PUBLISH: &str =
    "O(N+M) where N is the channel's subscribers and M the patterns subscribed to";
const ACTIVE: &str = "O(N) where N is the number of channels that have subscribers";
const STR: &str = "O(N) where N is the length of the strings";
const VALUE: &str = "O(N) where N is the size of the value";
const ELEMS: &str = "O(N) where N is the number of elements given or asked for";
const LIST_N: &str = "O(N) where N is the number of elements of the list";

/// The documentation of a command or subcommand (`client|list`), by its lower-case
/// name.
pub fn doc(name: &str) -> Option<Doc> {
    if let Some(z) = zset_doc(name) {
        return Some(z);
    }
    if let Some(t) = tx_doc(name) {
        return Some(t);
    }
    if let Some(b) = blocking_doc(name) {
        return Some(b);
    }
    if let Some(h) = super::hll::doc(name) {
        return Some(h);
    }
    if let Some(x) = super::streams::doc(name) {
        return Some(x);
    }
    if let Some(g) = super::geo::doc(name) {
        return Some(g);
    }
    use self::d as x;
    let (s, c, g, n, h) = ("string", "connection", "generic", "server", "hash");
    Some(match name {
        "get" => x("Returns the string value of a key", "1.0.0", s, O1),
        "set" => x(
            "Sets a key's value, with options for expiry and conditions",
            "1.0.0",
            s,
            O1,
        ),
        "setnx" => x(
            "Sets a key's value only if the key does not exist",
            "1.0.0",
            s,
            O1,
        ),
        "setex" => x(
            "Sets a key's value and its expiry in seconds",
            "2.0.0",
            s,
            O1,
        ),
        "psetex" => x(
            "Sets a key's value and its expiry in milliseconds",
            "2.6.0",
            s,
            O1,
        ),
        "getset" => x(
            "Sets a key's value and returns the previous one",
            "1.0.0",
            s,
            O1,
        ),
        "getdel" => x("Returns a key's value and deletes the key", "6.2.0", s, O1),
        "getex" => x(
            "Returns a key's value and changes its expiry",
            "6.2.0",
            s,
            O1,
        ),
        "mget" => x("Returns the values of several keys", "1.0.0", s, KEYS),
        "mset" => x("Sets several keys at once", "1.0.1", s, KEYS),
        "incr" => x("Adds one to the integer in a key", "1.0.0", s, O1),
        "decr" => x("Subtracts one from the integer in a key", "1.0.0", s, O1),
        "incrby" => x("Adds an integer to the integer in a key", "1.0.0", s, O1),
        "decrby" => x(
            "Subtracts an integer from the integer in a key",
            "1.0.0",
            s,
            O1,
        ),
        "incrbyfloat" => x(
            "Adds a floating point number to the number in a key",
            "2.6.0",
            s,
            O1,
        ),
        "append" => x(
            "Appends to a key's value, creating the key if needed",
            "2.0.0",
            s,
            O1,
        ),
        "strlen" => x("Returns the length of a key's value", "2.2.0", s, O1),
        "getrange" => x(
            "Returns part of a key's value",
            "2.4.0",
            s,
            "O(N) where N is the length returned",
        ),
        "substr" => x(
            "Returns part of a key's value (the old name of GETRANGE)",
            "1.0.0",
            s,
            "O(N) where N is the length returned",
        ),
        "setrange" => x(
            "Overwrites part of a key's value from an offset",
            "2.2.0",
            s,
            O1,
        ),
        "del" => x("Deletes keys", "1.0.0", g, KEYS),
        "unlink" => x("Deletes keys (as DEL)", "4.0.0", g, KEYS),
        "exists" => x("Counts how many of the keys given exist", "1.0.0", g, KEYS),
        "touch" => x(
            "Counts how many of the keys given exist (weft-kv keeps no access times)",
            "3.2.1",
            g,
            KEYS,
        ),
        "expire" => x("Sets a key's time to live in seconds", "1.0.0", g, O1),
        "pexpire" => x("Sets a key's time to live in milliseconds", "2.6.0", g, O1),
        "expireat" => x(
            "Sets when a key expires, as a Unix time in seconds",
            "1.2.0",
            g,
            O1,
        ),
        "pexpireat" => x(
            "Sets when a key expires, as a Unix time in milliseconds",
            "2.6.0",
            g,
            O1,
        ),
        "ttl" => x("Returns a key's time to live in seconds", "1.0.0", g, O1),
        "pttl" => x(
            "Returns a key's time to live in milliseconds",
            "2.6.0",
            g,
            O1,
        ),
        "expiretime" => x(
            "Returns when a key expires, as a Unix time in seconds",
            "7.0.0",
            g,
            O1,
        ),
        "pexpiretime" => x(
            "Returns when a key expires, as a Unix time in milliseconds",
            "7.0.0",
            g,
            O1,
        ),
        "persist" => x("Removes a key's expiry", "2.2.0", g, O1),
        "type" => x(
            "Returns the type of a key's value (string, or none)",
            "1.0.0",
            g,
            O1,
        ),
        "ping" => x("Answers PONG, or the message given", "1.0.0", c, O1),
        "echo" => x("Answers the message given", "1.0.0", c, O1),
        "hello" => x(
            "Chooses the protocol version, authenticates, names the connection",
            "6.0.0",
            c,
            O1,
        ),
        "auth" => x("Authenticates the connection", "1.0.0", c, O1),
        "select" => x("Selects the database (weft-kv has one, 0)", "1.0.0", c, O1),
        "quit" => x("Closes the connection", "1.0.0", c, O1),
        "reset" => x("Resets the connection's state", "6.2.0", c, O1),
        "client" => x("Commands about client connections", "2.4.0", c, SUBS),
        "client|id" => x("Returns the connection's id", "5.0.0", c, O1),
        "client|getname" => x("Returns the connection's name", "2.6.9", c, O1),
        "client|setname" => x("Names the connection", "2.6.9", c, O1),
        "client|setinfo" => x(
            "Accepts the client library's name and version",
            "7.2.0",
            c,
            O1,
        ),
        "client|info" => x("Describes the connection", "6.2.0", c, O1),
        "client|list" => x("Describes every connection", "2.4.0", c, CLIENTS),
        "client|kill" => x("Closes connections", "2.4.0", c, CLIENTS),
        "client|pause" => x(
            "Holds the commands of every client, or only writes, for a time",
            "2.9.50",
            c,
            O1,
        ),
        "client|unpause" => x("Ends a pause", "6.2.0", c, O1),
        "client|reply" => x(
            "Turns the connection's replies off, on, or off for one command",
            "3.2.0",
            c,
            O1,
        ),
        "client|no-evict" => x("Marks the connection as not to be evicted", "7.0.0", c, O1),
        "client|no-touch" => x("Accepted: weft-kv keeps no access times", "7.2.0", c, O1),
        "client|help" => x("Describes the subcommands", "5.0.0", c, O1),
        "client|tracking" => x("Turns tracking off (weft-kv has none)", "6.0.0", c, O1),
        "client|trackinginfo" => x("Returns tracking's state: off", "6.2.0", c, O1),
        "client|getredir" => x("Returns -1: no tracking redirection", "6.0.0", c, O1),
        "client|caching" => x("Refused: no tracking", "6.0.0", c, O1),
        "info" => x(
            "Describes the server: version, clients, memory, persistence, statistics",
            "1.0.0",
            n,
            O1,
        ),
        "config" => x("Commands about the server's settings", "2.0.0", n, SUBS),
        "config|get" => x(
            "Returns the settings matching patterns",
            "2.0.0",
            n,
            "O(N) where N is the number of settings",
        ),
        "config|set" => x("Changes settings while the server runs", "2.0.0", n, O1),
        "config|resetstat" => x("Resets the statistics", "2.0.0", n, O1),
        "config|rewrite" => x(
            "Refused: weft-kv takes its settings from the command line",
            "2.8.0",
            n,
            O1,
        ),
        "config|help" => x("Describes the subcommands", "5.0.0", n, O1),
        "command" => x(
            "Describes the commands",
            "2.8.13",
            n,
            "O(N) where N is the number of commands",
        ),
        "command|count" => x("Returns the number of commands", "2.8.13", n, O1),
        "command|docs" => x(
            "Documents commands",
            "7.0.0",
            n,
            "O(N) where N is the number of commands",
        ),
        "command|getkeys" => x(
            "Returns the keys of a command's arguments",
            "2.8.13",
            n,
            "O(N) where N is the number of arguments",
        ),
        "command|getkeysandflags" => x(
            "Returns the keys of a command's arguments, with how it uses them",
            "7.0.0",
            n,
            "O(N) where N is the number of arguments",
        ),
        "command|info" => x(
            "Describes commands",
            "2.8.13",
            n,
            "O(N) where N is the number of commands",
        ),
        "command|list" => x(
            "Returns the names of the commands",
            "7.0.0",
            n,
            "O(N) where N is the number of commands",
        ),
        "command|help" => x("Describes the subcommands", "5.0.0", n, O1),
        "dbsize" => x("Returns the number of keys", "1.0.0", n, O1),
        "keys" => x("Returns the keys matching a pattern", "1.0.0", g, ALL),
        "scan" => x(
            "Iterates over the keys, a few at a time",
            "2.8.0",
            g,
            "O(1) per call",
        ),
        "flushdb" => x("Deletes every key", "1.0.0", n, ALL),
        "flushall" => x("Deletes every key", "1.0.0", n, ALL),
        "save" => x("Writes the logs to the disk", "1.0.0", n, O1),
        "bgsave" => x("Compacts the logs in the background", "1.0.0", n, O1),
        "bgrewriteaof" => x("Compacts the logs in the background", "1.0.0", n, O1),
        "lastsave" => x("Returns the Unix time of the last SAVE", "1.0.0", n, O1),
        "slowlog" => x("Commands about the slow log", "2.2.12", n, SUBS),
        "slowlog|get" => x("Returns the slow log's newest entries", "2.2.12", n, "O(N)"),
        "slowlog|len" => x("Returns the slow log's length", "2.2.12", n, O1),
        "slowlog|reset" => x("Empties the slow log", "2.2.12", n, "O(N)"),
        "slowlog|help" => x("Describes SLOWLOG's subcommands", "6.2.0", n, O1),
        "latency" => x("Commands about latency events", "2.8.13", n, SUBS),
        "latency|latest" => x("Returns each event's latest sample", "2.8.13", n, O1),
        "latency|history" => x("Returns an event's samples", "2.8.13", n, O1),
        "latency|reset" => x("Forgets events' samples", "2.8.13", n, O1),
        "latency|doctor" => x("Reports on the latency events", "2.8.13", n, O1),
        "latency|help" => x("Describes LATENCY's subcommands", "2.8.13", n, O1),
        "memory" => x("Commands about memory", "4.0.0", n, SUBS),
        "memory|usage" => x("Returns the bytes a key and its value take", "4.0.0", n, O1),
        "memory|stats" => x("Returns the server's memory figures", "4.0.0", n, O1),
        "memory|doctor" => x("Reports on the server's memory", "4.0.0", n, O1),
        "memory|malloc-stats" => x("Returns the allocator's statistics", "4.0.0", n, O1),
        "memory|purge" => x("Asks the allocator to give memory back", "4.0.0", n, O1),
        "memory|help" => x("Describes MEMORY's subcommands", "4.0.0", n, O1),
        "lolwut" => x("Shows a picture and the version", "5.0.0", n, O1),
        "debug" => x("Commands for tests and tools", "1.0.0", n, O1),
        "shutdown" => x(
            "Writes the logs to the disk and stops the server",
            "1.0.0",
            n,
            ALL,
        ),
        "time" => x("Returns the server's time", "2.6.0", n, O1),
        "wait" => x("Waits for replicas (weft-kv has none)", "3.0.0", g, O1),
        "role" => x(
            "Returns the server's replication role: a primary without replicas",
            "2.8.12",
            n,
            O1,
        ),
        "object" => x("Tells about a key's value", "2.2.3", g, SUBS),
        "object|encoding" => x("Returns how a key's value is held", "2.2.3", g, O1),
        "object|freq" => x("Not kept: weft-kv has no LFU policy", "4.0.0", g, O1),
        "object|idletime" => x("Returns 0: access times are not kept", "2.2.3", g, O1),
        "object|refcount" => x("Returns 1: values are not shared", "2.2.3", g, O1),
        "object|help" => x("Returns OBJECT's help", "6.2.0", g, O1),
        "move" => x("Moves a key to another database", "1.0.0", g, O1),
        "swapdb" => x("Swaps two databases", "4.0.0", n, ALL),
        "msetnx" => x(
            "Sets keys only if none of them exists, atomically",
            "1.0.1",
            s,
            KEYS,
        ),
        "hset" => x("Sets fields of a hash, creating it", "2.0.0", h, FIELDS),
        "hsetnx" => x("Sets a field of a hash only if it has none", "2.0.0", h, O1),
        "hmset" => x(
            "Sets fields of a hash (as HSET, answering OK)",
            "2.0.0",
            h,
            FIELDS,
        ),
        "hget" => x("Returns a field's value", "2.0.0", h, O1),
        "hmget" => x("Returns the values of fields", "2.0.0", h, FIELDS),
        "hdel" => x("Removes fields of a hash", "2.0.0", h, FIELDS),
        "hlen" => x("Returns the number of fields of a hash", "2.0.0", h, O1),
        "hstrlen" => x("Returns the length of a field's value", "3.2.0", h, O1),
        "hexists" => x("Says whether a hash has a field", "2.0.0", h, O1),
        "hkeys" => x("Returns the fields of a hash", "2.0.0", h, HASH),
        "hvals" => x("Returns the values of a hash", "2.0.0", h, HASH),
        "hgetall" => x("Returns the fields and values of a hash", "2.0.0", h, HASH),
        "hincrby" => x("Adds an integer to a field", "2.0.0", h, O1),
        "hincrbyfloat" => x(
            "Adds a number to a field, in extended precision",
            "2.6.0",
            h,
            O1,
        ),
        "hrandfield" => x("Returns random fields of a hash", "6.2.0", h, FIELDS),
        "hscan" => x("Walks the fields of a hash with a cursor", "2.8.0", h, O1),
        "sadd" => x("Adds members to a set, creating it", "1.0.0", SET, MEMBERS),
        "srem" => x("Removes members from a set", "1.0.0", SET, MEMBERS),
        "scard" => x("Returns the number of members of a set", "1.0.0", SET, O1),
        "sismember" => x("Says whether a set has a member", "1.0.0", SET, O1),
        "smismember" => x("Says whether a set has each member", "6.2.0", SET, MEMBERS),
        "smembers" => x("Returns the members of a set", "1.0.0", SET, SET_N),
        "srandmember" => x("Returns random members of a set", "1.0.0", SET, MEMBERS),
        "spop" => x(
            "Removes and returns random members of a set",
            "1.0.0",
            SET,
            MEMBERS,
        ),
        "sscan" => x("Walks the members of a set with a cursor", "2.8.0", SET, O1),
        "smove" => x("Moves a member from one set to another", "1.0.0", SET, O1),
        "sinter" => x("Returns the intersection of sets", "1.0.0", SET, SETS),
        "sintercard" => x(
            "Returns the size of the intersection of sets",
            "7.0.0",
            SET,
            SETS,
        ),
        "sunion" => x("Returns the union of sets", "1.0.0", SET, SETS),
        "sdiff" => x(
            "Returns the members of a set that other sets lack",
            "1.0.0",
            SET,
            SETS,
        ),
        "sinterstore" => x(
            "Stores the intersection of sets in a key",
            "1.0.0",
            SET,
            SETS,
        ),
        "sunionstore" => x("Stores the union of sets in a key", "1.0.0", SET, SETS),
        "sdiffstore" => x("Stores the difference of sets in a key", "1.0.0", SET, SETS),
        "setbit" => x("Sets or clears one bit of a string", "2.2.0", "bitmap", O1),
        "getbit" => x("Returns one bit of a string", "2.2.0", "bitmap", O1),
        "bitcount" => x(
            "Counts the 1 bits of a string or of its range",
            "2.6.0",
            "bitmap",
            STR,
        ),
        "bitpos" => x(
            "Finds the first 0 or 1 bit of a string or of its range",
            "2.8.7",
            "bitmap",
            STR,
        ),
        "bitop" => x(
            "Stores the bitwise AND, OR, XOR or NOT of strings in a key",
            "2.6.0",
            "bitmap",
            STR,
        ),
        "bitfield" => x(
            "Reads and writes integers of any width at any bit offset of a string",
            "3.2.0",
            "bitmap",
            FIELDS,
        ),
        "bitfield_ro" => x(
            "Reads integers of any width at any bit offset of a string",
            "6.0.0",
            "bitmap",
            FIELDS,
        ),
        "lcs" => x(
            "Finds the longest common subsequence of two strings",
            "7.0.0",
            s,
            "O(N*M) where N and M are the lengths of the two strings",
        ),
        "rename" => x(
            "Renames a key, replacing any key of the new name",
            "1.0.0",
            g,
            VALUE,
        ),
        "renamenx" => x("Renames a key if the new name is free", "1.0.0", g, VALUE),
        "copy" => x("Copies a key's value to another key", "6.2.0", g, VALUE),
        "dump" => x(
            "Returns a key's value in weft-kv's own format",
            "2.6.0",
            g,
            VALUE,
        ),
        "restore" => x(
            "Creates a key from the value DUMP returned",
            "2.6.0",
            g,
            VALUE,
        ),
        "randomkey" => x("Returns a random key", "1.0.0", g, O1),
        "sort" => x(
            "Sorts a list, set or sorted set, optionally storing the result",
            "1.0.0",
            g,
            SORT_N,
        ),
        "sort_ro" => x("Sorts a list, set or sorted set", "7.0.0", g, SORT_N),
        "function" => x(
            "Functions (not supported; FLUSH answers OK)",
            "7.0.0",
            "scripting",
            SUBS,
        ),
        "script" => x(
            "Scripts (not supported; FLUSH answers OK)",
            "2.6.0",
            "scripting",
            SUBS,
        ),
        "function|flush" => x(
            "Removes every function: there are none",
            "7.0.0",
            "scripting",
            O1,
        ),
        "script|flush" => x(
            "Removes every script: there are none",
            "2.6.0",
            "scripting",
            O1,
        ),
        "function|help" | "script|help" => x("Describes the subcommands", "5.0.0", "scripting", O1),
        _ if name.starts_with("function|")
            || name.starts_with("script|")
            || name.starts_with("eval")
            || name.starts_with("fcall") =>
        {
            x(
                "Not supported: weft-kv has no scripting",
                "7.0.0",
                "scripting",
                NONE,
            )
        }
        "lpush" => x(
            "Pushes elements at the head of a list, creating it",
            "1.0.0",
            "list",
            ELEMS,
        ),
        "rpush" => x(
            "Pushes elements at the tail of a list, creating it",
            "1.0.0",
            "list",
            ELEMS,
        ),
        "lpushx" => x(
            "Pushes elements at the head of an existing list",
            "2.2.0",
            "list",
            ELEMS,
        ),
        "rpushx" => x(
            "Pushes elements at the tail of an existing list",
            "2.2.0",
            "list",
            ELEMS,
        ),
        "lpop" => x(
            "Removes and returns elements from the head of a list",
            "1.0.0",
            "list",
            ELEMS,
        ),
        "rpop" => x(
            "Removes and returns elements from the tail of a list",
            "1.0.0",
            "list",
            ELEMS,
        ),
        "llen" => x(
            "Returns the number of elements of a list",
            "1.0.0",
            "list",
            O1,
        ),
        "lrange" => x(
            "Returns a range of elements of a list",
            "1.0.0",
            "list",
            LIST_N,
        ),
        "lindex" => x(
            "Returns the element at an index of a list",
            "1.0.0",
            "list",
            LIST_N,
        ),
        "lset" => x(
            "Replaces the element at an index of a list",
            "1.0.0",
            "list",
            LIST_N,
        ),
        "linsert" => x(
            "Inserts an element before or after another in a list",
            "2.2.0",
            "list",
            LIST_N,
        ),
        "lrem" => x(
            "Removes elements equal to a value from a list",
            "1.0.0",
            "list",
            LIST_N,
        ),
        "ltrim" => x(
            "Keeps only a range of elements of a list",
            "1.0.0",
            "list",
            LIST_N,
        ),
        "lpos" => x(
            "Returns the positions of elements equal to a value in a list",
            "6.0.6",
            "list",
            LIST_N,
        ),
        "lmpop" => x(
            "Removes and returns elements from the first non-empty list of several",
            "7.0.0",
            "list",
            ELEMS,
        ),
        "lmove" => x(
            "Moves an element from one end of a list to an end of another",
            "6.2.0",
            "list",
            O1,
        ),
        "rpoplpush" => x(
            "Moves the last element of a list to the head of another",
            "1.2.0",
            "list",
            O1,
        ),
        // pub/sub
        "subscribe" => x(
            "Listens for messages published to channels",
            "2.0.0",
            "pubsub",
            CHANNELS,
        ),
        "unsubscribe" => x(
            "Stops listening to channels (all of them if none is given)",
            "2.0.0",
            "pubsub",
            CHANNELS,
        ),
        "psubscribe" => x(
            "Listens for messages published to channels matching patterns",
            "2.0.0",
            "pubsub",
            CHANNELS,
        ),
        "punsubscribe" => x(
            "Stops listening to patterns (all of them if none is given)",
            "2.0.0",
            "pubsub",
            CHANNELS,
        ),
        "ssubscribe" => x(
            "Listens for messages published to shard channels",
            "7.0.0",
            "pubsub",
            CHANNELS,
        ),
        "sunsubscribe" => x(
            "Stops listening to shard channels (all of them if none is given)",
            "7.0.0",
            "pubsub",
            CHANNELS,
        ),
        "publish" => x(
            "Posts a message to a channel; answers how many received it",
            "2.0.0",
            "pubsub",
            PUBLISH,
        ),
        "spublish" => x(
            "Posts a message to a shard channel; answers how many received it",
            "7.0.0",
            "pubsub",
            PUBLISH,
        ),
        "pubsub" => x("Pub/sub introspection", "2.8.0", "pubsub", SUBS),
        "pubsub|channels" => x(
            "The channels that have subscribers",
            "2.8.0",
            "pubsub",
            ACTIVE,
        ),
        "pubsub|shardchannels" => x(
            "The shard channels that have subscribers",
            "7.0.0",
            "pubsub",
            ACTIVE,
        ),
        "pubsub|numsub" => x(
            "The number of subscribers of each channel given",
            "2.8.0",
            "pubsub",
            CHANNELS,
        ),
        "pubsub|shardnumsub" => x(
            "The number of subscribers of each shard channel given",
            "7.0.0",
            "pubsub",
            CHANNELS,
        ),
        "pubsub|numpat" => x(
            "The number of patterns that have subscribers",
            "2.8.0",
            "pubsub",
            O1,
        ),
        "pubsub|help" => x("What PUBSUB's subcommands do", "6.2.0", "pubsub", O1),
        _ => return None,
    })
}

/// The sorted-set commands' documentation.
fn zset_doc(name: &str) -> Option<Doc> {
    const LOG: &str = "O(log(N)) where N is the number of members";
    const LOG_M: &str = "O(M*log(N)) where M is the number of members given";
    const RANGE: &str = "O(log(N)+M) where M is the number of members answered";
    const ALGEBRA: &str = "O(N*K) where N is the members of the inputs and K their number";
    let z = "sorted-set";
    let x = |summary, since, complexity| Some(d(summary, since, z, complexity));
    match name {
        "zadd" => x(
            "Adds members with scores to a sorted set, or changes their scores",
            "1.2.0",
            LOG_M,
        ),
        "zincrby" => x("Adds a number to a member's score", "1.2.0", LOG),
        "zrem" => x("Removes members of a sorted set", "1.2.0", LOG_M),
        "zcard" => x("Returns the number of members of a sorted set", "1.2.0", O1),
        "zscore" => x("Returns a member's score", "1.2.0", O1),
        "zmscore" => x("Returns the scores of members", "6.2.0", FIELDS),
        "zrank" => x("Returns a member's rank by ascending score", "2.0.0", LOG),
        "zrevrank" => x("Returns a member's rank by descending score", "2.0.0", LOG),
        "zcount" => x("Counts the members within a range of scores", "2.0.0", LOG),
        "zlexcount" => x("Counts the members within a range of members", "2.8.9", LOG),
        "zrange" => x(
            "Returns members by rank, score or member range",
            "1.2.0",
            RANGE,
        ),
        "zrangebyscore" => x("Returns members within a range of scores", "1.0.5", RANGE),
        "zrevrangebyscore" => x(
            "Returns members within a range of scores, highest first",
            "2.2.0",
            RANGE,
        ),
        "zrangebylex" => x("Returns members within a range of members", "2.8.9", RANGE),
        "zrevrangebylex" => x(
            "Returns members within a range of members, highest first",
            "2.8.9",
            RANGE,
        ),
        "zrevrange" => x(
            "Returns members by rank, highest score first",
            "1.2.0",
            RANGE,
        ),
        "zrangestore" => x(
            "Stores the members a range selects in another key",
            "6.2.0",
            RANGE,
        ),
        "zremrangebyrank" => x("Removes the members of a range of ranks", "2.0.0", RANGE),
        "zremrangebyscore" => x("Removes the members of a range of scores", "1.2.0", RANGE),
        "zremrangebylex" => x("Removes the members of a range of members", "2.8.9", RANGE),
        "zpopmin" => x(
            "Removes and returns the members of the lowest scores",
            "5.0.0",
            RANGE,
        ),
        "zpopmax" => x(
            "Removes and returns the members of the highest scores",
            "5.0.0",
            RANGE,
        ),
        "zmpop" => x(
            "Removes and returns members from the first non-empty sorted set",
            "7.0.0",
            RANGE,
        ),
        "zrandmember" => x("Returns random members of a sorted set", "6.2.0", RANGE),
        "zscan" => x(
            "Walks the members of a sorted set with a cursor",
            "2.8.0",
            O1,
        ),
        "zunion" => x("Returns the union of sorted sets", "6.2.0", ALGEBRA),
        "zinter" => x("Returns the intersection of sorted sets", "6.2.0", ALGEBRA),
        "zdiff" => x("Returns the difference of sorted sets", "6.2.0", ALGEBRA),
        "zintercard" => x(
            "Counts the members of the intersection of sorted sets",
            "7.0.0",
            ALGEBRA,
        ),
        "zunionstore" => x("Stores the union of sorted sets in a key", "2.0.0", ALGEBRA),
        "zinterstore" => x(
            "Stores the intersection of sorted sets in a key",
            "2.0.0",
            ALGEBRA,
        ),
        "zdiffstore" => x(
            "Stores the difference of sorted sets in a key",
            "6.2.0",
            ALGEBRA,
        ),
        _ => None,
    }
}

/// The transaction commands' documentation (`server/multi.rs`).
fn tx_doc(name: &str) -> Option<Doc> {
    let t = "transactions";
    Some(match name {
        "multi" => d(
            "Starts a transaction: later commands are queued",
            "1.2.0",
            t,
            O1,
        ),
        "exec" => d(
            "Runs the queued commands as one transaction, unless a watched key changed",
            "1.2.0",
            t,
            "Depends on the commands queued",
        ),
        "discard" => d(
            "Discards the queued commands",
            "2.0.0",
            t,
            "O(N) where N is the number of commands queued",
        ),
        "watch" => d(
            "Watches keys: EXEC aborts if one of them changes",
            "2.2.0",
            t,
            KEYS,
        ),
        "unwatch" => d(
            "Forgets every watched key",
            "2.2.0",
            t,
            "O(N) where N is the number of keys watched",
        ),
        _ => return None,
    })
}

/// The blocking commands' documentation (`server/blocking.rs`).
fn blocking_doc(name: &str) -> Option<Doc> {
    let (l, z) = ("list", "sorted-set");
    let log = "O(K*log(N)) where K is the number of keys given and N the members";
    Some(match name {
        "blpop" => d(
            "Removes and returns the first element of the first non-empty list of several, or blocks until one gets one",
            "2.0.0",
            l,
            KEYS,
        ),
        "brpop" => d(
            "Removes and returns the last element of the first non-empty list of several, or blocks until one gets one",
            "2.0.0",
            l,
            KEYS,
        ),
        "brpoplpush" => d(
            "Moves the last element of a list to the head of another, or blocks until the list gets one",
            "2.2.0",
            l,
            O1,
        ),
        "blmove" => d(
            "Moves an element from one end of a list to an end of another, or blocks until the list gets one",
            "6.2.0",
            l,
            O1,
        ),
        "blmpop" => d(
            "Removes and returns elements from the first non-empty list of several, or blocks until one gets some",
            "7.0.0",
            l,
            ELEMS,
        ),
        "bzpopmin" => d(
            "Removes and returns the member with the lowest score of the first non-empty sorted set of several, or blocks until one gets one",
            "5.0.0",
            z,
            log,
        ),
        "bzpopmax" => d(
            "Removes and returns the member with the highest score of the first non-empty sorted set of several, or blocks until one gets one",
            "5.0.0",
            z,
            log,
        ),
        "bzmpop" => d(
            "Removes and returns members with the lowest or highest scores from the first non-empty sorted set of several, or blocks until one gets some",
            "7.0.0",
            z,
            log,
        ),
        _ => return None,
    })
}
