// otpu_seq: the sequencer and the dispatch window of one slice.
//
// Fetch: at `start` the program (PROG_N instructions at DRAM byte PROG_ADDR, and with SEQ_WC the
// wait table after it) streams into IMEM through the DRAM port (ticket holder SEQ). Then one
// instruction per cycle: the 16 registers (R0 reads 0, R8..R15 = the run arguments), the
// register-relative words resolved, the 4-deep hardware loop stack, LI/ADDI/LOOP/NOP retired
// here, RLD (waits for every older writer of its TMEM word, then three cycles), HALT (waits for
// every unit; CHAIN fetches the next program). Every other instruction takes one of WIN slots
// with its footprint (otpu_defs.svh) and enters its unit's in-order queue.
//
// A queued instruction may start when the window says so: with SEQ_WC = 0 the scoreboard (it
// waits for every older in-flight instruction its footprint conflicts with; an MM's TMEM ranges
// hold back only its write-back, `mxu_wr_ok`), with SEQ_WC = 1 its WAITC entry (per-queue counts
// of incomplete instructions, a mask of recent dispatches that must have released, sync).
//
// Faults: each slot keeps its instruction's pc and dispatch number. An error (a unit's, on the
// instruction it runs, or the sequencer's own at pc) stops dispatch (S_FAULT) and the machine
// stops once every older instruction has completed, naming the oldest faulting instruction's pc
// and code: the instruction the golden simulator, which runs them one at a time, faults on.
module otpu_seq
#(
  parameter int D = 32,
  parameter int BB = 32,                 // DRAM beat bytes
  parameter int IMEM_INSTRS = 1024,
  parameter int TMEM_WORDS = 8192,
  parameter int WIN = 8,
  parameter int SEQ_WC = 0,
  parameter int ACT_BLOCKS = 16,
  parameter int DSTEP = 0,
  parameter int STREAM = 0,
  parameter int DRAM_LOG2 = 24,
  parameter int NU = 5                   // units (otpu_defs.svh NUNITS)
) (
  input  logic             clk,
  input  logic             rst,
  // run control
  input  logic             start,
  input  logic [31:0]      prog_addr,
  input  logic [31:0]      prog_n,
  input  logic [7:0][31:0] args,
  output logic             running,
  output logic             halted,
  output logic [7:0]       error,
  output logic [31:0]      error_pc,
  output logic [31:0]      icount,
  // program fetch through the DRAM arbiter
  output logic             fetch_req,         // wants the DRAM (holds the head ticket)
  output logic             dr_valid,
  output logic [31:0]      dr_addr,
  output logic [15:0]      dr_bytes,
  input  logic             dr_ready,
  input  logic             dr_rvalid,
  input  logic [BB*8-1:0]  dr_rdata,
  output logic             fetch_done,        // pops the ticket
  // DRAM tickets in dispatch order
  output logic             ticket_push,
  output logic [2:0]       ticket_unit,
  // unit queues
  output logic [NU-1:0]              u_valid,     // head may start
  output logic                       mxu_queued,  // the MXU's queue holds an MM (its words in u_words)
  output logic [NU-1:0][7:0][31:0]   u_words,
  input  logic [NU-1:0]              u_take,
  input  logic [NU-1:0]              u_release,
  input  logic [NU-1:0]              u_done,
  input  logic [NU-1:0]              u_error,
  input  logic [NU-1:0][7:0]         u_error_code,
  output logic             mxu_wr_ok,
  // RLD's TMEM word
  output logic             rld_rd,
  output logic [31:0]      rld_addr,
  input  logic             rld_gnt,           // (TMEM_IMPL 3 may deny the read: it goes again)
  input  logic [31:0]      rld_data
);
  `include "otpu_defs.svh"
  `include "otpu_fp_funcs.svh"
  localparam int SW = $clog2(WIN);
  localparam int IW = $clog2(IMEM_INSTRS);
  localparam int WPB = BB / 4;              // words per DRAM beat

  // -- program memory ---------------------------------------------------------------------------
  logic [31:0] imem [IMEM_INSTRS * 8];
  logic [63:0] wtab [IMEM_INSTRS];
  logic [31:0] nprog;

  // -- architectural state ------------------------------------------------------------------------
  logic [31:0] regs [16];
  logic [31:0] pc;
  logic [31:0] lp_start [4], lp_end [4], lp_left [4];
  logic [2:0]  lp_depth;
  logic [7:0][31:0] saved_args;

  typedef enum logic [2:0] {S_IDLE, S_FETCH, S_RUN, S_RLD, S_HALT, S_FAULT, S_DONE} state_t;
  state_t state;

  // -- fetch ----------------------------------------------------------------------------------------
  logic [31:0] f_base, f_bytes, f_req_off, f_got_off;
  assign fetch_req = state == S_FETCH;
  assign dr_valid = state == S_FETCH && f_req_off < f_bytes;
  assign dr_addr = f_base + f_req_off;
  assign dr_bytes = 16'((f_bytes - f_req_off) < BB ? (f_bytes - f_req_off) : BB);
  assign fetch_done = state == S_FETCH && dr_valid && dr_ready && f_req_off + BB >= f_bytes;

  // -- window slots -----------------------------------------------------------------------------------
  logic [WIN-1:0]                slot_valid;
  logic [RW-1:0]                 slot_rng [WIN][NRANGES];
  logic [WIN-1:0]                slot_barrier;
  logic [WIN-1:0][WIN-1:0]       slot_dep;        // older slots it must wait for (start)
  logic [WIN-1:0][WIN-1:0]       slot_depw;       // MM: older slots its write-back waits for
  logic [WIN-1:0][NQUEUES-1:0][15:0] slot_thr;    // WAITC: completions needed per queue
  logic [WIN-1:0][NQUEUES-1:0]   slot_thr_on;
  logic [WIN-1:0][5:0]           slot_seq;        // WAITC: queued-dispatch number (mod 64)
  logic [WIN-1:0][30:0]          slot_mask;       // WAITC: releases needed (by distance)
  logic [NQUEUES-1:0][15:0]      q_disp, q_comp;  // WAITC counters
  logic [5:0]                    qseq;            // next queued-dispatch number
  logic [63:0]                   released;        // by queued-dispatch number

  // per-unit in-order queues of slot ids, and each unit's running slot
  logic [NUNITS-1:0][WIN-1:0][SW-1:0] uq;
  logic [NUNITS-1:0][SW:0]            uq_n;
  logic [NUNITS-1:0][SW-1:0]          u_slot;
  logic [7:0][31:0]                   slot_words [WIN];
  logic [31:0]                        slot_pc [WIN];    // the instruction's pc
  logic [31:0]                        slot_ord [WIN];   // its dispatch number (icount then): older is smaller
  logic [7:0]                         f_code;           // S_FAULT: the oldest fault so far
  logic [31:0]                        f_pc, f_ord;

  // -- the instruction at pc ----------------------------------------------------------------------------
  logic [7:0][31:0] ins, w;
  logic [7:0]  op;
  logic [3:0]  ra, rb, rc, rd;
  logic [7:0]  flags;
  always_comb begin
    for (int i = 0; i < 8; i++) ins[i] = imem[{pc[IW-1:0], 3'(i)}];
    op = ins[0][7:0];
    ra = ins[0][11:8]; rb = ins[0][15:12]; rc = ins[0][19:16]; rd = ins[0][23:20];
    flags = ins[0][31:24];
    w = ins;
    case (op)
      OP_LOOP: w[2] = ins[2] + regs[ra];
      OP_RLD: begin w[1] = ins[1] + regs[ra]; w[2] = ins[2] + regs[rb]; end
      OP_WAITW, OP_DSTEP, OP_MM, OP_QST, OP_VOP: begin
        w[1] = ins[1] + regs[ra]; w[2] = ins[2] + regs[rb]; w[3] = ins[3] + regs[rc];
        if (op == OP_VOP) w[7] = ins[7] + regs[rd];
      end
      OP_LD, OP_ST, OP_GATHER: begin w[1] = ins[1] + regs[ra]; w[2] = ins[2] + regs[rb]; end
      OP_QACT: w[1] = ins[1] + regs[ra];
      OP_STREAM: begin
        w[2] = ins[2] + regs[ra]; w[3] = ins[3] + regs[ra]; w[4] = ins[4] + regs[rb];
        w[5] = ins[5] + regs[rc]; w[6] = ins[6] + regs[rd];
      end
      default: ;
    endcase
  end

  // -- footprint of the instruction at pc (otpu_core/sim/costs.py) ---------------------------------------
  logic [RW-1:0] fp [NRANGES];
  logic   fp_late;          // MM: TMEM conflicts hold back only the write-back
  logic   fp_barrier;
  logic   uses_dram;
  logic [2:0] unit, queue;
  always_comb begin
    logic [15:0] n, kb, m, ors, rows16, cols16, drs16, ars16, brs16;
    logic [7:0]  rows8, ab8, func;
    logic [1:0]  bmode;
    logic [2:0]  wf;
    logic [31:0] row_bytes, scale_bytes, ncols, nsc, width, lo_a, hi_a;
    for (int i = 0; i < NRANGES; i++) fp[i] = mkrange(SP_NONE, 0, 0, 0);
    fp_late = 0;
    fp_barrier = op == OP_BAR;
    unit = unit_of(op);
    queue = queue_of(op);
    uses_dram = 0;
    lo_a = 0;
    hi_a = 0;
    n = w[4][15:0]; kb = w[4][31:16];
    case (op)
      OP_LD: begin
        fp[0] = mkrange(SP_DRAM, 0, AW'(w[1]), AW'(w[1]) + AW'(4 * w[3]));
        fp[1] = mkrange(SP_TMEM, 1, AW'(w[2]), AW'(w[2]) + AW'(w[3]));
        uses_dram = 1;
      end
      OP_ST: begin
        fp[0] = mkrange(SP_TMEM, 0, AW'(w[2]), AW'(w[2]) + AW'(w[3]));
        fp[1] = mkrange(SP_DRAM, 1, AW'(w[1]), AW'(w[1]) + AW'(4 * w[3]));
        uses_dram = 1;
      end
      OP_WAITW: begin
        fp[0] = mkrange(SP_DRAM, 1, 0, {AW{1'b1}});
        fp[1] = mkrange(SP_TMEM, 1, AW'(w[2]), AW'(w[2]) + 1);
        uses_dram = 1;
      end
      OP_MM: begin
        m = {8'd0, w[6][23:16]};
        ors = w[6][15:0];
        wf = {flags[7], flags[5:4]};
        row_bytes = (wf == WF_INT4 || wf == WF_E2M1 || wf == WF_FP4X6) ? ((32'(kb) + 1) / 2) * D : 32'(kb) * D;
        scale_bytes = flags[F_UNIT] ? 0 : (wf == WF_INT8X ? 4 + 32'(kb) : 4 * 32'(kb));
        fp[0] = mkrange(SP_DRAM, 0, AW'(w[1]), AW'(w[1]) + AW'(n - 1) * AW'(w[5]) + AW'(row_bytes));
        fp[1] = mkrange(SP_ACT, 0, AW'(w[6][31:24]), AW'(w[6][31:24]) + AW'(kb));
        if (flags[F_ASCALE]) fp[2] = mkrange(SP_TMEM, 0, AW'(w[2]), AW'(w[2]) + AW'(m));
        else if (scale_bytes != 0)
          fp[2] = mkrange(SP_DRAM, 0, AW'(w[2]), AW'(w[2]) + AW'(n - 1) * AW'(w[7]) + AW'(scale_bytes));
        fp[3] = mkrange(SP_TMEM, 1, AW'(w[3]), AW'(w[3]) + AW'(m - 1) * AW'(ors) + AW'(n));
        if (flags[F_ACC]) fp[4] = mkrange(SP_TMEM, 0, AW'(w[3]), AW'(w[3]) + AW'(m - 1) * AW'(ors) + AW'(n));
        if (flags[F_RMAX]) fp[5] = mkrange(SP_TMEM, 1, AW'(w[3]) + AW'(m) * AW'(ors), AW'(w[3]) + AW'(m) * AW'(ors) + AW'(m));
        fp_late = 1;
        uses_dram = 1;
      end
      OP_QACT: begin
        rows8 = w[2][7:0]; ab8 = w[2][15:8]; kb = w[2][31:16];
        fp[0] = tile(0, w[1], 32'(rows8), 32'(kb) * D, w[3]);
        if (flags[F_CSCALE]) fp[1] = mkrange(SP_TMEM, 0, AW'(w[4]), AW'(w[4]) + AW'(32'(kb) * D));
        if (flags[F_RSCALE]) fp[2] = mkrange(SP_TMEM, 0, AW'(w[5]), AW'(w[5]) + AW'(rows8));
        fp[3] = mkrange(SP_ACT, 1, AW'(ab8), AW'(ab8) + AW'(kb));
      end
      OP_QST: begin
        rows16 = w[4][15:0];
        ncols = flags[F_HALF] ? 32'(kb) * D / 2 : 32'(kb) * D;
        nsc = flags[F_ROW] ? 32'(rows16) : 32'(rows16) * 32'(kb);
        fp[0] = tile(0, w[1], 32'(rows16), 32'(kb) * D, w[5]);
        fp[1] = mkrange(SP_DRAM, 1, AW'(w[2]), AW'(w[2]) + AW'(rows16 - 1) * AW'(w[6]) + AW'(ncols - 1) * AW'(w[7]) + 1);
        fp[2] = mkrange(SP_DRAM, 1, AW'(w[3]), AW'(w[3]) + AW'(4 * nsc));
        uses_dram = 1;
      end
      OP_VOP: begin
        rows16 = w[4][15:0]; cols16 = w[4][31:16];
        drs16 = w[5][15:0]; ars16 = w[5][31:16]; brs16 = w[6][15:0];
        func = w[6][23:16]; bmode = w[6][25:24];
        if (func == V_OUTER) begin
          fp[0] = tile(0, w[1], 32'(rows16), 32'(cols16), 32'(drs16));
          if (!flags[F_DONE]) fp[1] = mkrange(SP_TMEM, 0, AW'(w[2]), AW'(w[2]) + (flags[F_DSCALAR] ? 1 : AW'(cols16)));
          fp[2] = mkrange(SP_TMEM, 0, AW'(w[7]), AW'(w[7]) + AW'(cols16));
          fp[3] = tile(0, w[3], 32'(rows16), 1, 32'(brs16));
          fp[4] = tile(1, w[1], 32'(rows16), 32'(cols16), 32'(drs16));
        end else begin
          if (func != V_FILL) fp[0] = tile(0, w[2], 32'(rows16), 32'(cols16), 32'(ars16));
          if (func == V_ADD || func == V_SUB || func == V_RSUB || func == V_MUL || func == V_MAX || func == V_MIN ||
              func == V_FILL || func == V_EXP2SUB || func == V_RDOT)
            case (bmode)
              B_FULL: fp[1] = tile(0, w[3], 32'(rows16), 32'(cols16), 32'(brs16));
              B_ROW: fp[1] = tile(0, w[3], 32'(rows16), 1, 32'(brs16));
              B_COL: fp[1] = tile(0, w[3], 1, 32'(cols16), 0);
              default: ;
            endcase
          width = func == V_ARGMAX ? 2 : ((func >= V_RSUM) ? 1 : 32'(cols16));
          fp[2] = tile(1, w[1], 32'(rows16), width, 32'(drs16));
        end
      end
      OP_GATHER: begin
        fp[0] = tile(0, w[1], 32'(w[3][15:0]), 32'(w[3][31:16]), w[4]);
        fp[1] = tile(1, w[2], 32'(w[3][15:0]), 32'(w[3][31:16]), w[5]);
      end
      OP_DSTEP: begin              // q and k, v, e and beta, the state (read and written), o
        fp[0] = mkrange(SP_TMEM, 0, AW'(w[2]), AW'(w[2]) + AW'(2 * 32'(w[4][31:16])));
        fp[1] = mkrange(SP_TMEM, 0, AW'(w[3]), AW'(w[3]) + AW'(w[4][15:0]));
        fp[2] = mkrange(SP_TMEM, 0, AW'(w[5]), AW'(w[5]) + AW'(w[7]) + 1);
        fp[3] = mkrange(SP_DRAM, 1, AW'(w[1]), AW'(w[1]) + AW'(4 * 32'(w[4][15:0]) * 32'(w[4][31:16])));
        fp[4] = mkrange(SP_TMEM, 1, AW'(w[6]), AW'(w[6]) + AW'(w[4][15:0]));
        uses_dram = 1;
      end
      OP_STREAM: begin             // the timing model's conservative footprint (costs.py `_stream`); the source
        // and destination as one DRAM write range (they are one range in place, as the compiler emits them)
        fp[0] = mkrange(SP_TMEM, 0, AW'(w[1][15:0]), AW'(w[1][15:0]) + 8);
        fp[1] = mkrange(SP_TMEM, 0, AW'(w[4]), AW'(w[4]) + 4 * 256);
        fp[2] = mkrange(SP_TMEM, 0, AW'(w[5]), AW'(w[5]) + 256);
        fp[3] = mkrange(SP_TMEM, 0, AW'(w[6]), AW'(w[6]) + 3 * AW'(w[1][31:16]) + 1);
        fp[4] = mkrange(SP_TMEM, 1, AW'(w[7]), AW'(w[7]) + 256);
        if (!(flags[0] && flags[3])) begin         // not both SZERO and NODST
          lo_a = flags[0] ? w[3] : (flags[3] || w[2] < w[3] ? w[2] : w[3]);
          hi_a = flags[3] ? w[2] : (flags[0] || w[3] > w[2] ? w[3] : w[2]);
          fp[5] = mkrange(SP_DRAM, 1, AW'(lo_a), AW'(hi_a) + AW'(4 * 256 * 256));
        end
        uses_dram = 1;
      end
      default: ;
    endcase
  end

  // -- conflicts of the instruction at pc with the in-flight slots ---------------------------------------
  logic [WIN-1:0] done_slots, conf_start, conf_write, all_valid;
  logic [WIN-1:0] rld_conf;
  always_comb begin
    done_slots = '0;
    for (int u = 0; u < NUNITS; u++) if (u_done[u]) done_slots[u_slot[u]] = 1'b1;
    all_valid = slot_valid & ~done_slots;
    conf_start = '0;
    conf_write = '0;
    rld_conf = '0;
    for (int s = 0; s < WIN; s++) begin
      if (all_valid[s]) begin
        if (fp_barrier || slot_barrier[s]) conf_start[s] = 1'b1;
        for (int a = 0; a < NRANGES; a++)
          for (int b = 0; b < NRANGES; b++)
            if ((rng_write(fp[a]) || rng_write(slot_rng[s][b])) && ranges_overlap(fp[a], slot_rng[s][b])) begin
              if (fp_late && rng_space(fp[a]) == SP_TMEM) conf_write[s] = 1'b1;
              else conf_start[s] = 1'b1;
            end
        for (int b = 0; b < NRANGES; b++)
          if (rng_write(slot_rng[s][b]) && ranges_overlap(mkrange(SP_TMEM, 0, AW'(w[1]), AW'(w[1]) + 1), slot_rng[s][b]))
            rld_conf[s] = 1'b1;
      end
    end
  end

  // -- may a slot start? ------------------------------------------------------------------------------------
  // WAITC counts this cycle's completions and releases as the scoreboard does (done_slots): an
  // instruction starts in the cycle its producer completes, as the timing model starts it at the
  // producer's end (a unit's results are in TMEM and DRAM by the cycle it signals done)
  logic [WIN-1:0] can_start;
  logic [NQUEUES-1:0][15:0] q_comp_now;
  logic [63:0] released_now;
  always_comb begin
    q_comp_now = q_comp;
    released_now = released;
    for (int u = 0; u < NUNITS; u++) begin
      if (u_done[u] && queue_of(slot_words[u_slot[u]][0][7:0]) != Q_NONE)
        q_comp_now[queue_of(slot_words[u_slot[u]][0][7:0])] = q_comp_now[queue_of(slot_words[u_slot[u]][0][7:0])] + 1;
      if (u_release[u]) released_now[slot_seq[u_slot[u]]] = 1'b1;
    end
    for (int s = 0; s < WIN; s++) begin
      logic ok;
      ok = (slot_dep[s] & slot_valid & ~done_slots) == 0;
      if (SEQ_WC != 0) begin
        ok = (slot_dep[s] & slot_valid & ~done_slots) == 0;      // sync and BAR
        for (int q = 0; q < NQUEUES; q++)
          if (slot_thr_on[s][q] && $signed(16'(q_comp_now[q] - slot_thr[s][q])) < 0) ok = 1'b0;
        for (int j = 0; j < 31; j++)
          if (slot_mask[s][j] && !released_now[6'(slot_seq[s] - 6'(j) - 6'd1)]) ok = 1'b0;
      end
      can_start[s] = ok;
    end
    for (int u = 0; u < NUNITS; u++) begin
      // after a fault only the instructions older than it start
      u_valid[u] = uq_n[u] != 0 && can_start[uq[u][0]] && (state != S_FAULT || slot_ord[uq[u][0]] < f_ord);
      u_words[u] = slot_words[uq[u][0]];
    end
    mxu_queued = uq_n[U_MXU] != 0;
    mxu_wr_ok = SEQ_WC != 0 || (slot_depw[u_slot[U_MXU]] & slot_valid & ~done_slots) == 0;
  end

  // -- dispatch decision -------------------------------------------------------------------------------------
  logic [SW-1:0] free_slot;
  logic          have_free;
  always_comb begin
    have_free = 1'b0;
    free_slot = '0;
    for (int s = WIN - 1; s >= 0; s--) if (!slot_valid[s] || done_slots[s]) begin free_slot = SW'(s); have_free = 1'b1; end
  end

  logic queued_op, illegal, seq_op;
  logic [31:0] body, count;
  assign queued_op = unit != U_SEQ;
  assign seq_op = op == OP_NOP || op == OP_LI || op == OP_ADDI || op == OP_LOOP;
  always_comb begin
    illegal = 1'b0;
    case (op)
      OP_NOP, OP_HALT, OP_LI, OP_ADDI, OP_LOOP, OP_BAR, OP_RLD, OP_WAITW, OP_LD, OP_ST, OP_MM, OP_QACT,
      OP_QST, OP_VOP, OP_GATHER: ;
      OP_DSTEP: illegal = DSTEP == 0;
      OP_STREAM: illegal = STREAM == 0;
      default: illegal = 1'b1;
    endcase
  end
  assign body = w[1];
  assign count = w[2];

  // the loop end that a non-LOOP instruction at pc closes
  logic        at_end;
  assign at_end = lp_depth != 0 && lp_end[lp_depth - 1] == pc;

  logic [2:0] rld_wait;
  logic       any_busy;
  assign any_busy = slot_valid != 0;
  assign running = state == S_FETCH || state == S_RUN || state == S_RLD || state == S_HALT || state == S_FAULT;

  logic [WIN-1:0] u_take_slots;
  always_comb begin
    u_take_slots = '0;
    for (int u = 0; u < NUNITS; u++) if (u_take[u]) u_take_slots[uq[u][0]] = 1'b1;
  end

  // a unit error stops the run: the oldest of the instructions the units report an error on
  logic        unit_err;
  logic [7:0]  unit_err_code;
  logic [31:0] unit_err_pc, unit_err_ord;
  always_comb begin
    unit_err = 1'b0;
    unit_err_code = E_NONE;
    unit_err_pc = 0;
    unit_err_ord = 0;
    for (int u = 0; u < NUNITS; u++)
      if (u_error[u] && (!unit_err || slot_ord[u_slot[u]] < unit_err_ord)) begin
        unit_err = 1'b1;
        unit_err_code = u_error_code[u];
        unit_err_pc = slot_pc[u_slot[u]];
        unit_err_ord = slot_ord[u_slot[u]];
      end
  end

  // S_FAULT: whether an instruction older than the oldest fault so far is still in flight
  logic        older_busy;
  always_comb begin
    older_busy = 1'b0;
    for (int s = 0; s < WIN; s++) if (all_valid[s] && slot_ord[s] < f_ord) older_busy = 1'b1;
  end

  // every TMEM and DRAM range inside its memory (checked once, at dispatch); a STREAM's footprint is
  // the conservative one, so the stream engine checks its exact ranges
  logic range_bad;
  always_comb begin
    range_bad = 1'b0;
    if (op != OP_STREAM) for (int a = 0; a < NRANGES; a++) begin
      if (rng_space(fp[a]) == SP_TMEM && rng_hi(fp[a]) > AW'(TMEM_WORDS)) range_bad = 1'b1;
      if (rng_space(fp[a]) == SP_DRAM && op != OP_WAITW && rng_hi(fp[a]) > (AW'(1) << DRAM_LOG2)) range_bad = 1'b1;
    end
  end

  logic dispatch_ok;
  assign dispatch_ok = state == S_RUN && !unit_err && pc < nprog && !illegal && !range_bad && (!queued_op || have_free);
  assign ticket_push = dispatch_ok && queued_op && uses_dram;
  assign ticket_unit = unit;
  assign rld_rd = state == S_RLD && rld_wait == 0 && (rld_conf & slot_valid) == 0;
  assign rld_addr = w[1];

  task automatic advance();
    if (at_end) begin
      if (lp_left[lp_depth - 1] > 1) begin
        lp_left[lp_depth - 1] <= lp_left[lp_depth - 1] - 1;
        pc <= lp_start[lp_depth - 1];
      end else begin
        lp_depth <= lp_depth - 1;
        pc <= pc + 1;
      end
    end else pc <= pc + 1;
  endtask

  // a fault of the instruction at `at`, dispatch number `ord`: stop once the older ones are done
  task automatic fault(input logic [7:0] code, input logic [31:0] at, input logic [31:0] ord);
    f_code <= code;
    f_pc <= at;
    f_ord <= ord;
    state <= S_FAULT;
  endtask

  // the sequencer's own error at pc: younger than every instruction in flight
  task automatic fail(input logic [7:0] code);
    fault(code, pc, icount);
  endtask

  task automatic begin_fetch(input logic [31:0] addr, input logic [31:0] n);
    f_base <= addr;
    f_bytes <= n * (SEQ_WC != 0 ? 40 : 32);
    f_req_off <= 0;
    f_got_off <= 0;
    nprog <= n;
    state <= S_FETCH;
  endtask

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      halted <= 1'b0;
      error <= E_NONE;
      error_pc <= 0;
      slot_valid <= '0;
      uq_n <= '0;
      lp_depth <= 0;
      icount <= 0;
      q_disp <= '0;
      q_comp <= '0;
      qseq <= 0;
      released <= '1;
    end else begin
      // -- completions (any state) --
      for (int u = 0; u < NUNITS; u++) begin
        if (u_take[u]) begin
          u_slot[u] <= uq[u][0];
          for (int k = 0; k < WIN - 1; k++) uq[u][k] <= uq[u][k + 1];
        end
        if (u_done[u]) begin
          slot_valid[u_slot[u]] <= 1'b0;
          for (int s = 0; s < WIN; s++) begin
            slot_dep[s][u_slot[u]] <= 1'b0;
            slot_depw[s][u_slot[u]] <= 1'b0;
          end
          if (queue_of(slot_words[u_slot[u]][0][7:0]) != Q_NONE)
            q_comp[queue_of(slot_words[u_slot[u]][0][7:0])] <= q_comp[queue_of(slot_words[u_slot[u]][0][7:0])] + 1;
        end
        if (u_release[u]) released[slot_seq[u_slot[u]]] <= 1'b1;
      end

      case (state)
        S_IDLE, S_DONE: if (start) begin
          saved_args <= args;
          for (int r = 0; r < 16; r++) regs[r] <= r >= 8 ? args[r - 8] : 32'd0;
          pc <= 0;
          lp_depth <= 0;
          halted <= 1'b0;
          error <= E_NONE;
          icount <= 0;
          if (prog_n == 0 || prog_n > IMEM_INSTRS) begin
            error <= E_CHAIN;
            state <= S_DONE;
          end else begin_fetch(prog_addr, prog_n);
        end
        S_FETCH: begin
          if (dr_valid && dr_ready) f_req_off <= f_req_off + BB;
          if (dr_rvalid) begin
            for (int i = 0; i < WPB; i++) begin
              logic [31:0] off;
              off = f_got_off + 4 * i;
              if (off < 32 * nprog) imem[off[IW+4:2]] <= dr_rdata[32 * i +: 32];
              else if (off < 40 * nprog) begin
                logic [31:0] t;
                t = off - 32 * nprog;
                if (t[2]) wtab[t[IW+2:3]][63:32] <= dr_rdata[32 * i +: 32];
                else wtab[t[IW+2:3]][31:0] <= dr_rdata[32 * i +: 32];
              end
            end
            f_got_off <= f_got_off + BB;
            if (f_got_off + BB >= f_bytes) state <= S_RUN;
          end
        end
        S_RUN: begin
          if (unit_err) fault(unit_err_code, unit_err_pc, unit_err_ord);
          else if (pc >= nprog) fault(E_PROGRAM_END, nprog - 1, icount);   // the golden's pc: the last instruction
          else if (illegal) fail(op == OP_DSTEP ? E_UNSUPPORTED : E_OPCODE);
          else if (range_bad) fail(E_TMEM_RANGE);
          else begin
            case (op)
              OP_NOP: begin advance(); icount <= icount + 1; end
              OP_LI: begin if (rd != 0) regs[rd] <= w[1]; advance(); icount <= icount + 1; end
              OP_ADDI: begin if (rd != 0) regs[rd] <= regs[ra] + w[1]; advance(); icount <= icount + 1; end
              OP_LOOP: begin
                logic clash;
                clash = 1'b0;
                for (int l = 0; l < 4; l++) if (l < lp_depth && lp_end[l] == pc + body) clash = 1'b1;
                icount <= icount + 1;
                if (body < 1 || clash) fail(E_LOOP);
                else if (count == 0) pc <= pc + 1 + body;
                else if (lp_depth >= 4) fail(E_LOOP);
                else begin
                  lp_start[lp_depth] <= pc + 1;
                  lp_end[lp_depth] <= pc + body;
                  lp_left[lp_depth] <= count;
                  lp_depth <= lp_depth + 1;
                  pc <= pc + 1;
                end
              end
              OP_RLD: begin state <= S_RLD; rld_wait <= 0; end
              OP_HALT: state <= S_HALT;
              default: if (have_free) begin
                // into a slot and the unit's queue
                slot_valid[free_slot] <= 1'b1;
                slot_words[free_slot] <= w;
                slot_pc[free_slot] <= pc;
                slot_ord[free_slot] <= icount;
                slot_barrier[free_slot] <= fp_barrier;
                for (int r = 0; r < NRANGES; r++) slot_rng[free_slot][r] <= fp[r];
                slot_dep[free_slot] <= (SEQ_WC != 0) ? (fp_barrier || wtab[pc[IW-1:0]][59] ? all_valid : conf_start & slot_barrier)
                                                     : conf_start;
                slot_depw[free_slot] <= conf_write;
                for (int q = 0; q < NQUEUES; q++) begin
                  logic [3:0] c;
                  c = wtab[pc[IW-1:0]][4 * q +: 4];
                  slot_thr_on[free_slot][q] <= SEQ_WC != 0 && c != 4'd15;
                  slot_thr[free_slot][q] <= q_disp[q] - 16'(c);     // compared wrap-safe
                end
                slot_mask[free_slot] <= SEQ_WC != 0 ? wtab[pc[IW-1:0]][58:28] : '0;
                slot_seq[free_slot] <= qseq;
                if (queue != Q_NONE) begin
                  q_disp[queue] <= q_disp[queue] + 1;
                  qseq <= qseq + 1;
                  released[qseq] <= 1'b0;
                end
                uq[unit][uq_n[unit] - (u_take[unit] ? 1 : 0)] <= free_slot;
                icount <= icount + 1;
                advance();
              end
            endcase
          end
        end
        S_RLD: begin
          if (unit_err) fault(unit_err_code, unit_err_pc, unit_err_ord);
          else if (rld_rd && rld_gnt) rld_wait <= 1;
          else if (rld_wait != 0) begin
            if (rld_wait == 2) begin
              logic [31:0] v;
              v = flags[F_RAW] ? rld_data : f2i(rld_data);
              if (flags[F_MUL]) v = v * w[2];
              if (rd != 0) regs[rd] <= v;
              icount <= icount + 1;
              advance();
              state <= S_RUN;
            end else rld_wait <= rld_wait + 1;
          end
        end
        S_HALT: if (unit_err) fault(unit_err_code, unit_err_pc, unit_err_ord);
        else if (!any_busy) begin
          icount <= icount + 1;
          if (flags[F_CHAIN]) begin
            if (regs[ra] % D != 0 || regs[rb] == 0 || regs[rb] > IMEM_INSTRS) fail(E_CHAIN);
            else begin
              for (int r = 0; r < 16; r++) regs[r] <= r >= 8 ? saved_args[r - 8] : 32'd0;
              pc <= 0;
              lp_depth <= 0;
              begin_fetch(regs[ra], regs[rb]);
            end
          end else begin
            halted <= 1'b1;
            state <= S_DONE;
          end
        end
        S_FAULT: if (unit_err && unit_err_ord < f_ord) fault(unit_err_code, unit_err_pc, unit_err_ord);
        else if (!older_busy) begin
          error <= f_code;
          error_pc <= f_pc;
          state <= S_DONE;
        end
        default: ;
      endcase

      // queue lengths: a take and a push in one cycle cancel
      for (int u = 0; u < NUNITS; u++) begin
        logic push;
        push = state == S_RUN && dispatch_ok && queued_op && 3'(u) == unit && !seq_op && op != OP_RLD && op != OP_HALT;
        uq_n[u] <= uq_n[u] + (push ? 1 : 0) - (u_take[u] ? 1 : 0);
      end
    end
  end
endmodule
