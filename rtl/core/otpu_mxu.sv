// otpu_mxu: the matrix unit: MM, streamed weight rows x the stationary ACT rows (otpu_core/mxu.py).
//
// For each weight row the unit reads its side data (scale words, or the seed formats' scale row)
// and then its D-byte chunks from DRAM, one chunk per beat; the beats wait in a FIFO of
// FIFO_DEPTH. One D-block per cycle (4-bit formats: two blocks per chunk) meets all M ACT rows:
// per row j four exact integer sub-block dots (int8 activations against int8, int4 or
// E2M1-times-2 weights, times the 4-bit sub-block multipliers), shifted by the QACT SUB offsets.
// - public formats (WF 0..2): each block's term mul(mul(i2f(isum), ws), ascale) is added into
//   partial k mod 4, and a finished row folds (p0 + p2) + (p1 + p3);
// - seed formats (WF 3, 4): the block sums, shifted by the weight's per-block exponent, add up
//   exactly in a 48-bit accumulator (two's complement, wrapping); a finished row is
//   mul(mul(mul(i2f(acc), 2^-Emax), Sw), Sa).
// - MM PAIR (PAIR targets, 4-bit weights, 2M <= MCOLS): a whole chunk a cycle; columns 0..M-1
//   take its even block 2c against ACT rows 0..M-1, columns M..2M-1 its odd block 2c+1 against
//   ACT rows M..2M-1 (each ACT row reads its own block), and output row j accumulates
//   p = add(t[j][2c], t[j+M][2c+1]) (+0 for the missing odd block of an odd kb) into partial
//   c mod 4; the seed formats add both shifted block sums into row j's accumulator.
// A finished row's M results queue for the write-back, which waits for `wr_ok` (the window's
// TMEM conflicts) and applies ACC (add the old value) or ASCALE (old value times alpha_j first);
// RMAX keeps the first maximum of each written row j and writes it after the last row.
module otpu_mxu
#(
  parameter int D = 32,
  parameter int MCOLS = 2,
  parameter int ROWS = 2,
  parameter int PAIR = 0,
  parameter int LANES = 4,
  parameter int ACT_BLOCKS = 16,
  parameter int BB = 32,
  parameter int FIFO_DEPTH = 64,
  parameter int LATENCY = 7,
  parameter int DRAM_LATENCY = 30,
  parameter int DRAM_RATE_Q8 = 6554
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   in_valid,
  input  logic [7:0][31:0]       in_w,
  input  logic                   in_queued,        // in_w is a queued MM (it may not start yet)
  output logic                   take,
  output logic                   release_o,
  output logic                   done,
  output logic                   err,
  output logic [7:0]             err_code,
  input  logic                   wr_ok,
  // DRAM (reads only)
  output logic                   req_valid,
  output logic [31:0]            req_addr,
  output logic [15:0]            req_bytes,
  input  logic                   req_ready,
  output logic                   dram_pop,
  input  logic                   resp_valid,
  input  logic [BB*8-1:0]        resp_rdata,
  // ACT RAM
  output logic [ROWS-1:0][$clog2(ACT_BLOCKS)-1:0] act_rblk,
  input  logic [ROWS-1:0][D*8-1:0] act_rq,
  input  logic [ROWS-1:0][31:0]  act_rscale,
  input  logic [ROWS-1:0][15:0]  act_rsub,
  // TMEM
  output logic [LANES-1:0]       rd_en,
  output logic [LANES-1:0][31:0] rd_addr,
  input  logic                   rd_gnt,
  input  logic [LANES-1:0][31:0] rd_data,
  output logic [LANES-1:0]       wr_en,
  output logic [LANES-1:0][31:0] wr_addr,
  output logic [LANES-1:0][31:0] wr_data
);
  `include "otpu_defs.svh"
  `include "otpu_fp_funcs.svh"
  localparam int FW = $clog2(FIFO_DEPTH + 1);
  localparam int SBYTES = 4 * ACT_BLOCKS + 4;     // the largest side data of one weight row
  localparam int SUBW = D / 4;
  localparam int OQ = 8;                          // finished rows waiting for the write-back
  localparam int M = MCOLS;

  typedef enum logic [2:0] {S_IDLE, S_CHECK, S_PREP, S_RUN, S_FINISH, S_DONE, S_ERR} state_t;
  state_t state;

  // -- the instruction --------------------------------------------------------------------------------
  logic [7:0][31:0] w;
  logic [31:0] sa, ssa, out, rs, srs;
  logic [15:0] n, kb, ors;
  logic [7:0]  m, ab;
  logic [2:0]  wf;
  logic        unit, acc, rmax, ascale, four, seed, pair_req, pair;
  assign sa = w[1]; assign ssa = w[2]; assign out = w[3];
  assign n = w[4][15:0]; assign kb = w[4][31:16]; assign rs = w[5];
  assign ors = w[6][15:0]; assign m = w[6][23:16]; assign ab = w[6][31:24]; assign srs = w[7];
  assign wf = {w[0][31], w[0][29:28]};
  assign unit = w[0][24 + F_UNIT]; assign acc = w[0][24 + F_ACC]; assign rmax = w[0][24 + F_RMAX];
  assign ascale = w[0][24 + F_ASCALE];
  assign pair_req = w[0][24 + F_PAIR];
  assign pair = PAIR != 0 && pair_req;            // without PAIR the datapath has no column reuse
  assign four = wf == WF_INT4 || wf == WF_E2M1 || wf == WF_FP4X6;
  assign seed = wf == WF_INT8X || wf == WF_FP4X6;

  // an MM's shape from its words: chunks and side bytes per weight row, array cycles (4-bit: two
  // a chunk, the half of an odd kb's last chunk that holds no block included; PAIR: one) and DRAM bytes
  function automatic logic mm_four(input logic [7:0][31:0] x);
    logic [2:0] f;
    f = {x[0][31], x[0][29:28]};
    mm_four = f == WF_INT4 || f == WF_E2M1 || f == WF_FP4X6;
  endfunction
  function automatic logic [31:0] mm_nch(input logic [7:0][31:0] x);
    mm_nch = mm_four(x) ? (32'(x[4][31:16]) + 1) / 2 : 32'(x[4][31:16]);
  endfunction
  function automatic logic [31:0] mm_sbytes(input logic [7:0][31:0] x);
    mm_sbytes = x[0][24 + F_UNIT] ? 0 : ({x[0][31], x[0][29:28]} == WF_INT8X ? 4 + 32'(x[4][31:16]) : 4 * 32'(x[4][31:16]));
  endfunction
  function automatic logic [47:0] mm_cycles(input logic [7:0][31:0] x);
    mm_cycles = 48'(x[4][15:0]) * 48'(mm_nch(x)) * (mm_four(x) && !(PAIR != 0 && x[0][24 + F_PAIR]) ? 48'd2 : 48'd1);
  endfunction
  function automatic logic [47:0] mm_bytes(input logic [7:0][31:0] x);
    mm_bytes = 48'(x[4][15:0]) * 48'(mm_nch(x) * D + mm_sbytes(x));
  endfunction

  logic [31:0] nch, sbytes;                        // chunks and side bytes per weight row
  assign nch = mm_nch(w);
  assign sbytes = mm_sbytes(w);

  assign take = (state == S_IDLE || state == S_DONE) && in_valid;
  assign done = state == S_DONE;
  assign release_o = done;

  // -- ACT side data of the MM: sub-block offsets and their row maxima (S_PREP, one block a cycle) ---
  logic [15:0]    prep_k;
  logic           with_sub;
  logic [M-1:0][2:0] emax;
  logic [M-1:0][31:0] row_sa;                      // seed formats: the row's one activation scale
  logic           act_scale_mismatch;

  // -- DRAM requests: per weight row, its side beats then its chunks ---------------------------------------
  // The requester works on its own copy of an MM (rw): the running one, or, once the running one's
  // requests are all issued, the MM queued next if its array cycles exceed its transfer cycles
  // (r_pf): its weights then stream while the running MM still computes, so the DRAM latency
  // overlaps its compute as the timing model's max(compute, transfer + latency) has it. Its
  // beats queue behind the running MM's in the FIFO. DRAM is granted in dispatch order and
  // serves requests in order, so every older DRAM write (ST, QST, DSTEP) is in before a prefetched
  // read. A transfer-bound MM (every int8 one) is not fetched ahead: the prefetch could only run
  // it ahead of the model's transfer + latency.
  logic [7:0][31:0] rw;
  logic        r_pf;                               // rw is the queued MM, not taken yet
  logic [31:0] r_sa, r_ssa, r_rs, r_srs, r_n, r_nch, r_sbytes;
  assign r_sa = rw[1]; assign r_ssa = rw[2]; assign r_rs = rw[5]; assign r_srs = rw[7];
  assign r_n = 32'(rw[4][15:0]);
  assign r_nch = mm_nch(rw);
  assign r_sbytes = mm_sbytes(rw);
  logic        pf_load, pf_fit;
  assign pf_fit = mm_cycles(in_w) != 0 &&
                  64'(mm_cycles(in_w) - 1) * 64'(DRAM_RATE_Q8) >= 64'(mm_bytes(in_w)) * 256;
  logic [31:0] q_row, q_idx;                       // request position
  logic        q_side;                             // requesting side beats
  logic [FW-1:0] outstanding, f_count;
  logic [31:0] side_first, side_last;              // beat indices of the row's side data
  always_comb begin
    side_first = (r_ssa + q_row * r_srs) / BB;
    side_last = (r_ssa + q_row * r_srs + r_sbytes - 1) / BB;
  end
  // a row whose side data lies in the side beat fetched last (rows' scales share beats) reuses it
  // (and its first chunk is requested in that cycle: a reused side beat costs no request slot)
  logic        q_cv, q_hit, q_side_now;
  logic [31:0] q_cbeat;
  assign q_hit = q_side && q_cv && side_first == side_last && side_first == q_cbeat;
  assign q_side_now = q_side && !q_hit;
  logic req_more;
  assign req_more = (r_pf || state == S_PREP || state == S_RUN) && q_row < r_n;
  assign pf_load = in_queued && !take && !r_pf && !pop_pend && q_row >= r_n && state != S_ERR && pf_fit;
  assign req_valid = req_more && 32'(outstanding) + 32'(f_count) < FIFO_DEPTH;
  always_comb begin
    if (q_side_now) begin
      logic [31:0] lo, hi, bs, be;
      logic whole;
      req_addr = (side_first + q_idx) * BB;
      // a beat shared by the rows' side data is charged every row's bytes in it, once
      whole = r_srs <= r_sbytes && !(q_cv && side_first + q_idx == q_cbeat);
      lo = whole ? r_ssa : r_ssa + q_row * r_srs;
      hi = whole ? r_ssa + (r_n - 1) * r_srs + r_sbytes : r_ssa + q_row * r_srs + r_sbytes;
      bs = req_addr > lo ? req_addr : lo;
      be = req_addr + BB < hi ? req_addr + BB : hi;
      req_bytes = 16'(be - bs);
    end else begin
      req_addr = r_sa + q_row * r_rs + q_idx * D;
      req_bytes = 16'(D);
    end
  end
  logic last_req;
  assign last_req = !q_side_now && q_idx + 1 == r_nch && q_row + 1 == r_n;
  // a prefetched MM keeps the DRAM port until its transfer time after its start has passed, where
  // the model ends its transfer: younger transfers queue behind it as the model serves them
  logic        pf_run;                             // the running MM was fetched ahead
  logic        pop_pend;                           // its requests are issued, its ticket waits
  logic        xfer_ok;
  logic signed [63:0] xfer_acc;                    // (cycles since take - 1) x rate
  assign xfer_ok = pf_run && xfer_acc >= $signed(64'(mm_bytes(w)) * 256);
  logic        req_last;
  assign req_last = req_valid && req_ready && last_req;
  assign dram_pop = (req_last && !r_pf && (!pf_run || xfer_ok)) || (pop_pend && !r_pf && xfer_ok);

  // -- response FIFO ---------------------------------------------------------------------------------------------
  logic [BB*8-1:0] fifo [FIFO_DEPTH];
  logic [FW-1:0]   f_head, f_tail;
  logic            f_pop;

  // -- consumer: side data, then blocks ------------------------------------------------------------------------
  logic [31:0] c_row, c_idx, c_blk;                // consumer position
  logic        c_side;
  logic [7:0]  sbuf [SBYTES];                      // side data of the row being consumed
  logic [31:0] c_side_first;
  logic        c_half;                             // 4-bit: second block of the chunk
  logic        c_pad;                              // 4-bit, odd kb: the empty half of a row's last chunk
  // a prefetched MM computes its first block no earlier than its transfer + latency - compute
  // (+ HOLD_TAIL, the cycles from take to a block and from the last block to done that the
  // model's MXU_LATENCY covers) after its start: its beats arrive early, and the MM ends when the
  // model's max(compute, transfer + latency) says it does, never ahead of it
  localparam int HOLD_TAIL = 1;
  logic        held, hold_ok;
  logic signed [63:0] hold_acc;                    // (cycles since take + compute - latency) x rate
  assign hold_ok = !held || hold_acc >= $signed(64'(mm_bytes(w)) * 256);
  logic        blocks_go;                          // a block can be computed this cycle
  logic        oq_room;
  // the last side beat of a row and the row's first block go in one cycle when both have arrived
  // (the side data costs DRAM bandwidth, not a cycle of the array)
  logic        fast, side_end, blk_pop, c_hit, c_cv;
  logic [31:0] c_cbeat;
  logic [BB*8-1:0] c_cache, sdata;                 // the side beat consumed last; this row's side beat
  logic [1:0]  f_npop;
  logic [7:0]  sview [SBYTES];                     // sbuf with the side beat at the head merged in
  always_comb begin
    logic [31:0] lo, b0;
    lo = ssa + c_row * srs;
    b0 = (c_side_first + c_idx) * BB;
    side_end = b0 + BB >= lo + sbytes;
    c_hit = c_side && c_cv && c_side_first == (lo + sbytes - 1) / BB && c_side_first == c_cbeat;
    sdata = c_hit ? c_cache : chunk;
    for (int i = 0; i < SBYTES; i++) begin
      sview[i] = sbuf[i];
      if (c_side && lo + i >= b0 && lo + i < b0 + BB) sview[i] = sdata[8 * (lo + i - b0) +: 8];
    end
  end
  assign fast = state == S_RUN && c_row < 32'(n) && c_side && side_end && oq_room && hold_ok && !c_pad &&
                (c_hit ? f_count >= 1 : f_count >= 2);

  // the row's decoded side data
  logic [31:0] ws [ACT_BLOCKS];                    // public: block scales
  logic [3:0][5:0] mult [ACT_BLOCKS];              // 4-bit: sub-block multipliers
  logic [4:0]  wshift [ACT_BLOCKS];                // seed: block shifts
  logic [31:0] row_scale;                          // seed: Sw
  logic        side_bad;
  always_comb begin
    logic [7:0] base, top;
    side_bad = 1'b0;
    base = 8'hFF; top = 8'h00;
    for (int k = 0; k < ACT_BLOCKS; k++) begin
      logic [31:0] word;
      word = {sview[4 * k + 3], sview[4 * k + 2], sview[4 * k + 1], sview[4 * k]};
      ws[k] = unit ? ONE : (wf == WF_INT8 ? ftz(word) : ftz({word[15:0], 16'd0}));
      for (int b = 0; b < 4; b++)
        mult[k][b] = unit ? 6'd1 : (wf == WF_FP4X6 ? 6'(word >> (8 + 6 * b)) : {2'b00, 4'(word >> (16 + 4 * b))});
      if (k < kb && wf == WF_FP4X6) begin
        if (word[7:0] < base) base = word[7:0];
        if (word[7:0] > top) top = word[7:0];
      end
      wshift[k] = 0;
    end
    row_scale = ONE;
    if (!unit && wf == WF_INT8X) begin
      row_scale = ftz({sview[3], sview[2], sview[1], sview[0]});
      for (int k = 0; k < ACT_BLOCKS; k++) begin
        wshift[k] = 5'(sview[4 + k]);
        if (k < kb && sview[4 + k] > 16) side_bad = 1'b1;
      end
    end
    if (!unit && wf == WF_FP4X6) begin
      row_scale = base >= 2 ? {1'b0, 8'(base - 1), 23'd0} : 32'd0;
      if (top - base > 16) side_bad = 1'b1;
      for (int k = 0; k < ACT_BLOCKS; k++)
        wshift[k] = 5'({sview[4 * k + 3], sview[4 * k + 2], sview[4 * k + 1], sview[4 * k]} & 32'hFF) - 5'(base);
    end
  end

  // -- one block against the M ACT rows ----------------------------------------------------------------------------
  logic [D*8-1:0] chunk, blk_chunk;
  assign chunk = fifo[f_head];
  assign blk_chunk = fast && !c_hit ? fifo[f_head == FW'(FIFO_DEPTH - 1) ? 0 : f_head + 1] : chunk;
  // PAIR: ACT rows M.. read the odd block of the chunk
  function automatic logic hi_col(input int j);
    hi_col = pair && j >= 32'(m);
  endfunction
  always_comb
    for (int r = 0; r < ROWS; r++)
      act_rblk[r] = $bits(act_rblk[r])'(state == S_PREP ? 32'(ab) + 32'(prep_k) : 32'(ab) + c_blk + 32'(hi_col(r)));

  function automatic logic signed [11:0] weight_of(input logic [2:0] f, input logic [7:0] byte_, input logic hi,
                                                   input logic [5:0] mul);
    logic [3:0] nib;
    logic signed [11:0] v;
    nib = hi ? byte_[7:4] : byte_[3:0];
    case (nib[2:0])
      3'd0: v = 0; 3'd1: v = 1; 3'd2: v = 2; 3'd3: v = 3; 3'd4: v = 4; 3'd5: v = 6; 3'd6: v = 8; default: v = 12;
    endcase
    if (nib[3]) v = -v;                                  // E2M1 (decoded to twice its value)
    if (f == WF_INT4) v = 12'($signed(nib));
    weight_of = (f == WF_INT8 || f == WF_INT8X) ? 12'($signed(byte_)) : v * $signed({6'd0, mul});
  endfunction

  // the sub-block offset maximum a column's shifts use: that of the output row it feeds
  function automatic logic [2:0] emax_of(input int j);
    emax_of = emax[j];
    if (hi_col(j))
      for (int o = 0; o < M; o++) if (o + 32'(m) == j) emax_of = emax[o];
  endfunction
  logic signed [M-1:0][47:0] isum;                 // the block's exact sum per ACT row
  always_comb begin
    for (int j = 0; j < M; j++) begin
      logic signed [47:0] total;
      logic [31:0] jb;
      logic [2:0] em;
      logic jh;
      jb = c_blk + 32'(hi_col(j));
      jh = pair ? hi_col(j) : c_half;
      em = emax_of(j);
      total = 0;
      for (int b = 0; b < 4; b++) begin
        logic signed [31:0] dot;
        logic [2:0] e, sh;
        dot = 0;
        for (int i = 0; i < SUBW; i++) begin
          int el;
          logic [7:0] wb;
          el = b * SUBW + i;
          wb = four ? blk_chunk[8 * ((jh ? D / 2 : 0) + el / 2) +: 8] : blk_chunk[8 * el +: 8];
          dot += $signed(act_rq[j][8 * el +: 8]) * weight_of(wf, wb, four && el[0], mult[jb][b]);
        end
        e = act_rsub[j][3 * b +: 3];
        sh = with_sub ? em - e : 3'd0;
        total += $signed(48'(dot)) <<< sh;
      end
      isum[j] = total;
    end
  end

  // -- stage A: accumulate; a finished row's results ---------------------------------------------------------------
  logic            a_valid, a_last;
  logic [31:0]     a_row, a_blk;
  logic signed [M-1:0][47:0] a_isum;
  logic [M-1:0][31:0] a_ascale;
  logic [M-1:0][31:0] a_ws;
  logic [M-1:0][4:0] a_wshift;
  logic            a_pad;                          // PAIR: the chunk has no odd block (odd kb's last)
  logic [1:0]      a_pidx;                         // the partial of the block (PAIR: of the chunk)
  assign a_pidx = pair ? a_blk[2:1] : a_blk[1:0];
  logic [31:0]     a_row_scale;
  logic [M-1:0][3:0][31:0] part;                   // public partials
  logic signed [M-1:0][47:0] accum;                // seed accumulator

  logic [M-1:0][31:0] a_i2f, a_t1, a_t, a_t_hi, a_psum, a_term, a_padd, a_f02, a_f13, a_fold;
  logic signed [M-1:0][47:0] a_isum_hi;
  logic [M-1:0][4:0] a_wshift_hi;
  // PAIR: column j + M's term and block sum beside column j's (+0 / nothing for a missing odd block)
  always_comb
    for (int j = 0; j < M; j++) begin
      a_t_hi[j] = 32'd0;
      a_isum_hi[j] = 48'sd0;
      a_wshift_hi[j] = 5'd0;
      for (int i = 0; i < M; i++)
        if (pair && !a_pad && i == j + 32'(m)) begin
          a_t_hi[j] = a_t[i];
          a_isum_hi[j] = a_isum[i];
          a_wshift_hi[j] = a_wshift[i];
        end
      a_term[j] = pair ? a_psum[j] : a_t[j];
    end
  logic [M-1:0][31:0] a_exact, a_tot, a_tot2, a_seed;
  logic signed [M-1:0][47:0] a_acc_new;
  // the i2f instances take their default W=48: yosys 0.70 asserts when it re-derives this module for a
  // parameterised instance inside a generate loop
  for (genvar j = 0; j < M; j++) begin : g_col
    logic [7:0] e_bias;   // 127 - Emax, named: yosys widens a size cast inside a port's concatenation
    otpu_fp_i2f u_i2f (.i(a_isum[j]), .y(a_i2f[j]));
    otpu_fp_mul u_m1 (.a(a_i2f[j]), .b(a_ws[j]), .y(a_t1[j]));
    otpu_fp_mul u_m2 (.a(a_t1[j]), .b(a_ascale[j]), .y(a_t[j]));
    otpu_fp_add u_pp (.a(a_t[j]), .b(a_t_hi[j]), .sub(1'b0), .y(a_psum[j]));
    otpu_fp_add u_pa (.a(part[j][a_pidx]), .b(a_term[j]), .sub(1'b0), .y(a_padd[j]));
    otpu_fp_add u_f02 (.a(a_pidx == 0 ? a_padd[j] : part[j][0]), .b(a_pidx == 2 ? a_padd[j] : part[j][2]),
                       .sub(1'b0), .y(a_f02[j]));
    otpu_fp_add u_f13 (.a(a_pidx == 1 ? a_padd[j] : part[j][1]), .b(a_pidx == 3 ? a_padd[j] : part[j][3]),
                       .sub(1'b0), .y(a_f13[j]));
    otpu_fp_add u_fold (.a(a_f02[j]), .b(a_f13[j]), .sub(1'b0), .y(a_fold[j]));
    // seed: the exact sum, i2f, 2^-Emax, Sw, Sa
    assign a_acc_new[j] = accum[j] + (a_isum[j] <<< a_wshift[j]) + (a_isum_hi[j] <<< a_wshift_hi[j]);
    otpu_fp_i2f u_i2f48 (.i(a_acc_new[j]), .y(a_exact[j]));
    assign e_bias = 8'(127 - emax[j]);
    otpu_fp_mul u_e (.a(a_exact[j]), .b({1'b0, e_bias, 23'd0}), .y(a_tot[j]));
    otpu_fp_mul u_sw (.a(a_tot[j]), .b(a_row_scale), .y(a_tot2[j]));
    otpu_fp_mul u_sa (.a(a_tot2[j]), .b(row_sa[j]), .y(a_seed[j]));
  end

  // -- write-back queue ----------------------------------------------------------------------------------------------
  logic [M-1:0][31:0] oq_y [OQ];
  logic [31:0]        oq_row [OQ];
  logic [$clog2(OQ+1)-1:0] oq_n;
  assign oq_room = 32'(oq_n) + 3 <= OQ;

  // the write-back: (ACC) read the old values, then write
  logic [M-1:0][31:0] alpha;
  logic               alpha_ok, alpha_pend;
  logic               wb_rd, wb_pend;
  logic [M-1:0][31:0] wb_y;
  logic [31:0]        wb_row;
  logic [M-1:0][31:0] wb_prod, wb_sum;
  logic [M-1:0][31:0] best;
  logic [M-1:0]       best_any;
  logic               rmax_pend, rmax_done;
  for (genvar j = 0; j < M; j++) begin : g_wb
    otpu_fp_mul u_am (.a(rd_data[j]), .b(alpha[j]), .y(wb_prod[j]));
    otpu_fp_add u_aa (.a(ascale ? wb_prod[j] : rd_data[j]), .b(wb_y[j]), .sub(1'b0), .y(wb_sum[j]));
  end
  logic wb_want, wb_issue;                   // (ACC: its read granted; TMEM_IMPL 3 may deny it)
  assign wb_want = (state == S_RUN || state == S_FINISH) && oq_n != 0 && wr_ok && alpha_ok;
  assign wb_issue = wb_want && (!acc || rd_gnt);
  always_comb begin
    rd_en = '0;
    for (int l = 0; l < LANES; l++) rd_addr[l] = out + 32'(l) * 32'(ors) + oq_row[0];
    if ((state == S_RUN || state == S_FINISH) && wr_ok && !alpha_ok && !alpha_pend && ascale)
      for (int l = 0; l < LANES; l++) begin
        rd_en[l] = l < m;
        rd_addr[l] = ssa + l;
      end
    else if (wb_want && acc)
      for (int l = 0; l < LANES; l++) rd_en[l] = l < m;
    wr_en = '0;
    for (int l = 0; l < LANES; l++) begin
      wr_addr[l] = out + 32'(l) * 32'(ors) + wb_row;
      wr_data[l] = acc ? wb_sum[l % M] : wb_y[l % M];
    end
    if (wb_pend) for (int l = 0; l < LANES; l++) wr_en[l] = l < m;
    if (rmax_pend)
      for (int l = 0; l < LANES; l++) begin
        wr_en[l] = l < m;
        wr_addr[l] = out + 32'(m) * 32'(ors) + l;
        wr_data[l] = best[l % M];
      end
  end

  // -- control ----------------------------------------------------------------------------------------------------------
  logic [31:0] rows_written;
  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      err <= 1'b0;
      err_code <= E_NONE;
      outstanding <= 0; f_count <= 0; f_head <= 0; f_tail <= 0;
      rw <= '0;
      r_pf <= 1'b0;
      held <= 1'b0;
      c_pad <= 1'b0;
      pf_run <= 1'b0;
      pop_pend <= 1'b0;
      oq_n <= 0;
      a_valid <= 1'b0;
      wb_pend <= 1'b0;
      rmax_pend <= 1'b0;
    end else begin
      logic [$clog2(OQ+1)-1:0] on;
      logic pushed;
      on = oq_n;
      a_valid <= 1'b0;
      wb_pend <= 1'b0;
      rmax_pend <= 1'b0;
      case (state)
        S_CHECK: begin
          // in the golden simulator's order (sim/matrix.py mm_check): the ones before PAIR's
          // opcode check, then PAIR's shape (2M <= MCOLS, 4-bit) and its 8-aligned scale words
          logic early, bad;
          early = n == 0 || kb == 0 || m == 0 || (pair_req ? 2 * 32'(m) > ROWS : 32'(m) > MCOLS) ||
                  32'(ab) + 32'(kb) > ACT_BLOCKS;
          bad = early || wf > WF_FP4X6 || sa % D != 0 || rs % D != 0 || (ascale && !(unit && acc)) ||
                (pair_req && (PAIR == 0 || 2 * 32'(m) > MCOLS || !four || (!unit && (ssa % 8 != 0 || srs % 8 != 0))));
          if (bad) begin
            err <= 1'b1;
            err_code <= !early && pair_req && PAIR == 0 ? E_OPCODE : E_SHAPE;
            state <= S_ERR;
          end else begin
            state <= S_PREP;
            prep_k <= 0;
            with_sub <= 1'b0;
            emax <= '0;
            act_scale_mismatch <= 1'b0;
          end
        end
        S_PREP: begin
          // the MM's ACT blocks: any sub-block offsets, their maxima per row, one scale per row
          // (PAIR: every one of the 2M rows marks offsets; output row j's block k comes from
          // ACT row j, or j + M for an odd k)
          for (int j = 0; j < M; j++)
            if (j < (pair ? 2 * 32'(m) : 32'(m)) && act_rsub[j][15]) with_sub <= 1'b1;
          for (int j = 0; j < M; j++)
            if (j < m) begin
              logic [2:0] em;
              logic [15:0] sw;
              logic [31:0] sc;
              sw = act_rsub[j];
              sc = act_rscale[j];
              if (pair && prep_k[0])
                for (int i = 0; i < M; i++) if (i == j + 32'(m)) begin sw = act_rsub[i]; sc = act_rscale[i]; end
              em = emax[j];
              for (int b = 0; b < 4; b++)
                if (sw[3 * b +: 3] > em && sw[15]) em = sw[3 * b +: 3];
              emax[j] <= em;
              if (prep_k == 0) row_sa[j] <= sc;
              else if (sc != row_sa[j] && seed) act_scale_mismatch <= 1'b1;
            end
          if (32'(prep_k) + 1 >= 32'(kb)) begin
            state <= S_RUN;
          end
          prep_k <= prep_k + 1;
        end
        S_RUN: begin
          if ((with_sub && !seed) || act_scale_mismatch) begin
            err <= 1'b1;
            err_code <= E_SHAPE;
            state <= S_ERR;
          end
          if (c_row >= 32'(n) && !a_valid && oq_n == 0 && !wb_pend && !c_pad && !(pop_pend && !r_pf))
            state <= S_FINISH;
        end
        S_FINISH: begin
          if (rmax && !rmax_done) begin
            rmax_pend <= 1'b1;
            rmax_done <= 1'b1;
          end else if (!rmax_pend) state <= S_DONE;
        end
        S_DONE: state <= S_IDLE;
        default: ;
      endcase

      // request position
      if (q_hit && req_more) begin q_side <= 1'b0; q_idx <= 0; end
      if (req_valid && req_ready) begin
        if (q_side_now) begin
          q_cv <= 1'b1;
          q_cbeat <= side_first + q_idx;
          if ((side_first + q_idx) == side_last) begin q_side <= 1'b0; q_idx <= 0; end
          else q_idx <= q_idx + 1;
        end else if (q_idx + 1 == r_nch) begin
          q_row <= q_row + 1;
          q_idx <= 0;
          q_side <= r_sbytes != 0;
        end else begin
          q_side <= 1'b0;
          q_idx <= q_idx + 1;
        end
      end

      // FIFO of beats
      if (resp_valid) begin
        fifo[f_tail] <= resp_rdata;
        f_tail <= f_tail == FW'(FIFO_DEPTH - 1) ? 0 : f_tail + 1;
      end
      f_count <= f_count + FW'(resp_valid) - FW'(f_npop);
      outstanding <= outstanding + FW'(req_valid && req_ready) - FW'(resp_valid);
      f_head <= FW'((32'(f_head) + 32'(f_npop)) % FIFO_DEPTH);

      // consumer
      if (c_pad) c_pad <= 1'b0;
      if (state == S_RUN && f_count != 0 && c_row < 32'(n) && hold_ok) begin
        if (c_side) begin
          logic [31:0] lo;
          lo = ssa + c_row * srs;
          for (int b = 0; b < BB; b++) begin
            logic [31:0] a;
            a = (c_side_first + c_idx) * BB + b;
            if (a >= lo && a < lo + sbytes) sbuf[a - lo] <= sdata[8 * b +: 8];
          end
          if (!c_hit) begin c_cache <= chunk; c_cbeat <= c_side_first + c_idx; c_cv <= 1'b1; end
          if ((c_side_first + c_idx) * BB + BB >= lo + sbytes) begin c_side <= 1'b0; c_idx <= 0; end
          else c_idx <= c_idx + 1;
        end
        if (fast || (!c_side && oq_room && !c_pad)) begin
          // a block: into stage A
          if (side_bad) begin
            err <= 1'b1;
            err_code <= E_SHAPE;
            state <= S_ERR;
          end
          a_valid <= 1'b1;
          a_row <= c_row;
          a_blk <= c_blk;
          a_isum <= isum;
          for (int j = 0; j < M; j++) a_ascale[j] <= act_rscale[j];
          for (int j = 0; j < M; j++) begin
            a_ws[j] <= ws[c_blk + 32'(hi_col(j))];
            a_wshift[j] <= wshift[c_blk + 32'(hi_col(j))];
          end
          a_pad <= c_blk + 1 >= 32'(kb);
          a_row_scale <= row_scale;
          a_last <= c_blk + (pair ? 2 : 1) >= 32'(kb);
          if (c_blk + (pair ? 2 : 1) >= 32'(kb)) begin
            c_pad <= four && kb[0] && !pair;
            c_row <= c_row + 1;
            c_blk <= 0;
            c_half <= 1'b0;
            c_side <= sbytes != 0;
            c_idx <= 0;
            c_side_first <= (ssa + (c_row + 1) * srs) / BB;
          end else begin
            c_blk <= c_blk + (pair ? 2 : 1);
            c_half <= four && !pair ? !c_half : 1'b0;
          end
        end
      end

      // stage A
      pushed = 1'b0;
      if (a_valid) begin
        for (int j = 0; j < M; j++) begin
          if (!seed) begin
            part[j][a_pidx] <= a_padd[j];
            if (a_last) for (int q = 0; q < 4; q++) part[j][q] <= 32'd0;
          end else begin
            accum[j] <= a_last ? 48'sd0 : a_acc_new[j];
          end
        end
        if (a_last) begin
          for (int j = 0; j < M; j++) oq_y[on][j] <= seed ? a_seed[j] : a_fold[j];
          oq_row[on] <= a_row;
          pushed = 1'b1;
        end
      end

      // alpha (ASCALE)
      if (rd_en != 0 && rd_gnt && !alpha_ok && ascale && !wb_want) alpha_pend <= 1'b1;
      if (alpha_pend) begin
        for (int j = 0; j < M; j++) alpha[j] <= rd_data[j];
        alpha_ok <= 1'b1;
        alpha_pend <= 1'b0;
      end

      // write-back
      if (wb_issue) begin
        wb_pend <= 1'b1;
        wb_y <= oq_y[0];
        wb_row <= oq_row[0];
        for (int q = 0; q < OQ - 1; q++) begin oq_y[q] <= oq_y[q + 1]; oq_row[q] <= oq_row[q + 1]; end
        if (pushed) begin
          oq_y[on - 1] <= seed ? a_seed : a_fold;
          oq_row[on - 1] <= a_row;
        end
        on = on - 1;
      end
      if (pushed) on = on + 1;
      oq_n <= on;
      if (wb_pend) begin
        rows_written <= rows_written + 1;
        for (int j = 0; j < M; j++)
          if (j < m) begin
            logic [31:0] y, k;
            y = acc ? wb_sum[j] : wb_y[j];
            if (!best_any[j] || key_of(ftz(y)) > key_of(ftz(best[j]))) begin
              best[j] <= ftz(y);
              best_any[j] <= 1'b1;
            end
          end
      end

      // the requester takes the MM queued next (pf_load) or, not fetched ahead, the one taken now
      if (pf_load || (take && !r_pf)) begin
        rw <= in_w;
        q_row <= 0; q_idx <= 0; q_cv <= 1'b0;
        q_side <= in_w[0][24 + F_UNIT] == 0;
      end
      r_pf <= pf_load || (r_pf && !take);
      if (req_last && !dram_pop) pop_pend <= 1'b1;
      else if (dram_pop) pop_pend <= 1'b0;
      xfer_acc <= xfer_acc + DRAM_RATE_Q8;
      if (held) begin
        if (hold_ok) held <= 1'b0;
        else hold_acc <= hold_acc + DRAM_RATE_Q8;
      end
      if (take) begin
        w <= in_w;
        state <= S_CHECK;
        c_cv <= 1'b0;
        c_row <= 0; c_idx <= 0; c_blk <= 0; c_half <= 1'b0; c_pad <= 1'b0;
        c_side <= in_w[0][24 + F_UNIT] == 0;
        held <= r_pf;
        pf_run <= r_pf;
        xfer_acc <= 0;
        hold_acc <= (64'(mm_cycles(in_w)) - DRAM_LATENCY - HOLD_TAIL) * DRAM_RATE_Q8;
        c_side_first <= in_w[2] / BB;
        alpha_ok <= in_w[0][24 + F_ASCALE] == 0;
        alpha_pend <= 1'b0;
        rmax_done <= 1'b0;
        best_any <= '0;
        rows_written <= 0;
        for (int j = 0; j < M; j++) begin
          accum[j] <= 0;
          for (int q = 0; q < 4; q++) part[j][q] <= 32'd0;
        end
      end
    end
  end
  assign blk_pop = !four || pair || c_half || c_blk + 1 == 32'(kb);
  assign f_pop = state == S_RUN && f_count != 0 && c_row < 32'(n) && hold_ok && (c_side || (oq_room && blk_pop && !c_pad));
  assign f_npop = !f_pop ? 2'd0 : (c_hit ? (fast && blk_pop ? 2'd1 : 2'd0) : (c_side ? (fast && blk_pop ? 2'd2 : 2'd1) : 2'd1));
endmodule
