// Edge file: CPU time of processes from Linux /proc, for `bun run chaos --scale` (node:fs, getconf).
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/**
 * Clock ticks per second of the times in `/proc/<pid>/stat` (`getconf CLK_TCK`, USER_HZ; proc(5)),
 * 100 on Linux in practice and the fallback when getconf cannot run.
 */
export function clockTicks(): number {
  try {
    const n = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
    return Number.isSafeInteger(n) && n > 0 ? n : 100;
  } catch {
    return 100;
  }
}

/** The fields of `/proc/<pid>/stat` read here (proc(5)): parent pid and CPU times in clock ticks. */
export interface ProcStat {
  ppid: number;
  /** utime + stime: CPU of the process itself (all its threads), in clock ticks. */
  own: number;
  /** cutime + cstime: CPU of its children it has waited for (reaped), in clock ticks. */
  reaped: number;
}

/**
 * Reads `/proc/<pid>/stat`; undefined when the process is gone (or not Linux). The command name (field 2)
 * may hold spaces and parentheses, so fields are counted after its last `)` (proc(5): fields 4 ppid,
 * 14 utime, 15 stime, 16 cutime, 17 cstime).
 */
export function procStat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // After ") ": field 3 (state) is index 0, so field k is index k - 3.
  const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
  const n = (k: number) => Number(f[k - 3]);
  return { ppid: n(4), own: n(14) + n(15), reaped: n(16) + n(17) };
}

/** Pids whose parent is `pid` right now (a scan of /proc). */
export function childPids(pid: number): number[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  return entries
    .filter((d) => /^\d+$/.test(d))
    .map(Number)
    .filter((p) => procStat(p)?.ppid === pid);
}

/**
 * CPU used so far by the processes of `pids` that are alive (utime + stime + cutime + cstime of each),
 * plus what `reaper` has reaped (its cutime + cstime, not its own time): in clock ticks. With `reaper`
 * the parent of those processes, the difference of two readings counts a process killed in between too
 * (its whole time moves into the parent's cutime when the parent waits for it), so a SIGKILLed and
 * restarted receiver is not lost from the sum.
 */
export function cpuTicks(pids: readonly (number | undefined)[], reaper?: number): number {
  let ticks = reaper === undefined ? 0 : (procStat(reaper)?.reaped ?? 0);
  for (const pid of pids) {
    if (pid === undefined) continue;
    const s = procStat(pid);
    if (s) ticks += s.own + s.reaped;
  }
  return ticks;
}

/**
 * CPU used so far by a PostgreSQL server, in clock ticks: the postmaster (its own time and the backends it
 * has reaped) plus every live child (backends, checkpointer, WAL writer, autovacuum…). `postmasterPid`
 * is the first line of `postmaster.pid` (PostgreSQL manual, "Starting the Database Server"). 0 when it is gone.
 */
export function postgresCpuTicks(postmasterPid: number): number {
  const postmaster = procStat(postmasterPid);
  if (!postmaster) return 0;
  return postmaster.own + postmaster.reaped + cpuTicks(childPids(postmasterPid));
}
