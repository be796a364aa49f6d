// otpu_stream: the stream engine in the DMA unit: DSTEP (the Gated DeltaNet head step) and the
// hardware subset of STREAM (isa reference 2.5 `stream_hw_cfg`, 3.4 and 3.8; the golden
// otpu_core/sim/vector.py dstep and stream). Both are one datapath over a rows x cols fp32 state in
// DRAM (cols a multiple of 64 up to 256, rows 1..256), written back in place (a STREAM: to its
// destination):
//   A = RDOT(S, a)                        (a_en; DSTEP: a = k)
//   Dv = the scalar program of dmode:     D_DELTA  (X - A * K0) * K1   (DSTEP: (v - kv * e) * beta)
//                                         D_DELTA1 (X - A) * K1;  D_SCALE X * K1;  D_DOT A * K1
//   Y = S * G + Dv * B                    (G = K0, slot 3 or 1.0; B = slot 1; DSTEP: G = e, B = k)
//   O[r] = RDOT(Y, slot 0)                (q_en; DSTEP: q)
// with each op rounded as fp32.py's and RDOT the VOP reduction tree (64 partials, each +0 + t[j] +
// t[j + 64] + ... in order, then the fold p[i] += p[i + n] for n = 32 .. 1), so DSTEP is
// bit-identical to RDOT, MUL, SUB, MUL, OUTER, RDOT on the VPU. SZERO / DZERO: S reads +0 and no
// DRAM is read. A STREAM first reads its descriptor (20 words from TMEM, decoded as float-safe
// words) and checks it in the golden simulator's order (shape: a word not float-safe, reserved
// bits, too few op words, an op past 10, rows or cols 0, q_en with o_reg_en, a slot past 3); then
// a descriptor or flag outside the hardware subset, which the golden runs in its general form,
// stops the unit with E_UNSUPPORTED (the card's engine does not run it either); then the golden's
// range and alignment checks in its order (the slots, constants and X read: E_TMEM_RANGE; the
// source and destination alignment: E_SHAPE; the state and O: E_TMEM_RANGE); last a DRAM
// destination overlapping its source from above, E_UNSUPPORTED (the golden's row-by-row order
// there has a row read what an earlier row wrote, which the engine's read-ahead does not see).
//
// A stream of state beats (WPB = BB / 4 words each; the state is D-aligned and a row is whole
// beats) through a ring of RING_WORDS words:
//   - the reader requests the state's beats from the run's start, while the ring has room
//     (a beat's slot is free once its updated value has been sent back), and has the DRAM port
//     whenever it has a beat to request: the writes then keep the port busy to the end;
//   - a, K0, K1, X, B, G and q (those the instruction uses) come from TMEM in that order,
//     2 x LANES words a cycle, at the same time;
//   - stage K reduces each arrived beat against a (a beat a cycle), and at a row's end hands its
//     partials to its fold; the fold's sum A gives the row's Dv (from K0, K1 and X[r]);
//   - stage U takes a row whose Dv is known, a beat a cycle: Y = S * G + Dv * B into the beat's
//     slot (sent back from there) and Y * q into its partials; its fold gives O[r];
//   - the writer sends each updated beat when the reader has none to request.
// So the two stages and their folds work on different rows at once, and a state beat goes in and
// out each cycle. The unit holds the DRAM port for the whole instruction and completes when the
// last write is acknowledged and the last O is written, and no earlier than the model's stream
// engine (rows x cols / 8 + 200 cycles from its start, otpu_core/sim/costs.py, for DSTEP and
// STREAM alike): a zero state reads no DRAM, and this datapath would finish it sooner.
module otpu_stream
#(
  parameter int BB = 32,
  parameter int LANES = 4,
  parameter int D = 32,
  parameter int TMEM_WORDS = 8192,
  parameter int DRAM_LOG2 = 24
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   start,     // a DSTEP or a STREAM (in_w[0][7:0])
  input  logic [7:0][31:0]       in_w,
  output logic                   busy,
  output logic                   finish,
  output logic                   err,
  output logic [7:0]             err_code,
  // DRAM
  output logic                   req_valid,
  output logic                   req_write,
  output logic [31:0]            req_addr,
  output logic [BB*8-1:0]        req_wdata,
  output logic [BB-1:0]          req_wstrb,
  output logic [15:0]            req_bytes,
  input  logic                   req_ready,
  output logic                   dram_pop,
  input  logic                   resp_valid,
  input  logic                   resp_write,
  input  logic [BB*8-1:0]        resp_rdata,
  // TMEM
  output logic [2*LANES-1:0]       rd_en,   // the DMA's two read ports, LANES words each
  output logic [2*LANES-1:0][31:0] rd_addr,
  input  logic [1:0]               rd_gnt,
  input  logic [2*LANES-1:0][31:0] rd_data,
  output logic                   wr_en,
  output logic [31:0]            wr_addr,
  output logic [31:0]            wr_data
);
  `include "otpu_defs.svh"
  localparam int WPB = BB / 4;               // state words per beat: the stages' lanes
  localparam int CMAX = 256;                 // cols at most (DSTEP_COLS, the STREAM subset)
  localparam int RMAX = 256;                 // rows at most
  localparam int P = 64;                     // RDOT partials
  localparam int RING_WORDS = 1024;
  localparam int RB = RING_WORDS / WPB;      // ring beats
  localparam int DQ = 4;                     // Dv values between the stages
  localparam int STREAM_WORDS_PER_CYCLE = 8; // the model's stream engine (costs.py)
  localparam int STREAM_FILL = 200;
  localparam int NDESC = 20;                 // STREAM_DESC_FIXED + STREAM_MAX_OPS
  localparam int F_ZERO = 0, F_SRC_T = 1, F_DST_T = 2, F_NODST = 3;   // DZERO / SZERO, STREAM's TMEM flags
  localparam logic [1:0] DM_DELTA = 0, DM_DELTA1 = 1, DM_SCALE = 2, DM_DOT = 3;
  localparam logic [1:0] GM_CONST = 0, GM_SLOT = 1, GM_ONE = 2;
  localparam logic [31:0] FP_ONE = 32'h3f800000;

  typedef enum logic [1:0] {X_IDLE, X_DESC, X_CHECK, X_RUN} state_t;
  state_t state;
  logic [7:0][31:0] w;
  assign busy = state != X_IDLE;

  // -- what the run does: set from DSTEP's words at its start, from a STREAM's descriptor at X_CHECK ----
  logic [15:0] rows, cols;
  logic [31:0] src, dst, a_base, k0_addr, k1_addr, x_base, b_base, g_base, q_base, o_base;
  logic        szero, a_en, x_en, b_is_a, q_en;
  logic [1:0]  dmode, gmode;

  logic [31:0] ab [CMAX], bb [CMAX], gb [CMAX], qb [CMAX], xb [RMAX];
  logic [31:0] k0, k1;
  logic [31:0] dw [NDESC];
  logic [BB*8-1:0] ring [RB];
  logic [31:0] bpr, total, pace, elapsed;
  assign bpr = 32'(cols) / WPB;
  assign total = 32'(rows) * bpr;
  assign pace = 32'(rows) * 32'(cols) / STREAM_WORDS_PER_CYCLE + STREAM_FILL;

  // -- TMEM reads: in X_DESC the descriptor's NDESC words, in X_RUN a, K0, K1, X, B, G, q (the order
  //    the stages use them, each segment present only when used; each waits only for the words it
  //    needs: vl counts the words landed). 2 x LANES words a cycle through the two ports; when the
  //    upper port is denied (TMEM_IMPL 3: the same banks) only the lower one's count, and the upper
  //    words are read again --------------------------------------------------------------------------
  logic vec_issue;
  logic [31:0] vi, vl, vec_base, vec_k, vec_got, nread;
  logic [31:0] n_a, pk1, v0, b0, g0, q0, nvec;
  assign n_a = a_en ? 32'(cols) : 0;
  assign pk1 = n_a + 1;
  assign v0 = n_a + 2;
  assign b0 = v0 + (x_en ? 32'(rows) : 0);
  assign g0 = b0 + (b_is_a ? 0 : 32'(cols));
  assign q0 = g0 + (gmode == GM_SLOT ? 32'(cols) : 0);
  assign nvec = q0 + (q_en ? 32'(cols) : 0);
  assign nread = state == X_DESC ? NDESC : nvec;
  function automatic logic [31:0] vec_addr(input logic [31:0] j);
    if (state == X_DESC) vec_addr = 32'(w[1][15:0]) + j;
    else if (j < n_a) vec_addr = a_base + j;
    else if (j == n_a) vec_addr = k0_addr;
    else if (j == pk1) vec_addr = k1_addr;
    else if (j < b0) vec_addr = x_base + j - v0;
    else if (j < g0) vec_addr = b_base + j - b0;
    else if (j < q0) vec_addr = g_base + j - g0;
    else vec_addr = q_base + j - q0;
  endfunction
  assign vec_issue = (state == X_RUN || state == X_DESC) && vi < nread;
  assign vec_got = !vec_issue || !rd_gnt[0] ? 0 : (rd_gnt[1] ? 2 * LANES : LANES);
  always_comb for (int l = 0; l < 2 * LANES; l++) begin
    rd_en[l] = vec_issue && vi + l < nread;
    rd_addr[l] = vec_addr(vi + l);
  end

  // -- the STREAM descriptor (isa.StreamDesc.decode) and the hardware subset (isa.stream_hw_cfg) -----
  logic [NDESC-1:0][23:0] pl;                // payloads: sign -> bit 23, mantissa -> bits 22..0
  logic [NDESC-1:0]       fsafe;
  logic [3:0]  d_nops;
  logic [11:0] d_rows, d_cols;
  logic        d_a_en, d_q_en, d_out_p2, d_q_self, d_o_reg_en;
  logic [1:0]  d_a_op, d_a_idx, d_u_mode, d_g_src, d_b_src, d_q_idx;
  logic [2:0]  d_g_idx, d_b_idx, d_d_reg;
  logic [3:0]  d_rinit, d_rsave;
  logic [1:0]  d_dmode;
  logic        d_prog_ok, d_shape, d_unsup, d_range_t, d_align, d_range_d, d_overlap, d_uses_k0;
  logic [63:0] d_state_bytes, d_src, d_dst;
  logic [31:0] d_vec, d_ks;
  // op words of the four programs (isa.DPROGS): SOP_SUB = 1, SOP_MUL = 2; OP_A = 8, OP_X = 9, K0 = 10, K1 = 11
  localparam logic [14:0] P_A_K0 = {4'd10, 4'd8, 3'd0, 4'd2}, P_X_R0 = {4'd0, 4'd9, 3'd1, 4'd1},
                          P_R1_K1 = {4'd11, 4'd1, 3'd2, 4'd2}, P_X_A = {4'd8, 4'd9, 3'd1, 4'd1},
                          P_X_K1 = {4'd11, 4'd9, 3'd2, 4'd2}, P_A_K1 = {4'd11, 4'd8, 3'd2, 4'd2};
  always_comb begin
    logic [31:0] avail;
    for (int i = 0; i < NDESC; i++) begin
      fsafe[i] = dw[i][30:23] == 8'h80;
      pl[i] = {dw[i][31], dw[i][22:0]};
    end
    d_rows = pl[0][11:0]; d_cols = pl[0][23:12];
    d_a_en = pl[1][0]; d_a_op = pl[1][2:1]; d_a_idx = pl[1][4:3]; d_u_mode = pl[1][6:5]; d_g_src = pl[1][8:7];
    d_g_idx = pl[1][11:9]; d_b_src = pl[1][13:12]; d_b_idx = pl[1][16:14]; d_d_reg = pl[1][19:17];
    d_q_en = pl[1][20]; d_q_idx = pl[1][22:21]; d_out_p2 = pl[1][23];
    d_nops = pl[2][3:0]; d_rinit = pl[2][7:4]; d_rsave = pl[2][11:8]; d_q_self = pl[2][12]; d_o_reg_en = pl[2][13];
    // shape: what the golden's decode and its first checks refuse
    avail = 32'(TMEM_WORDS) - 32'(w[1][15:0]);          // words the golden reads: min(NDESC, TMEM_WORDS - desc)
    d_shape = !fsafe[0] || !fsafe[1] || !fsafe[2] || !fsafe[3] || !fsafe[4] || pl[3] != 0 || pl[2][23:17] != 0 ||
              (avail < NDESC && avail < 5 + 32'(d_nops));
    for (int i = 0; i < 15; i++)
      if (i < 32'(d_nops) && (!fsafe[5 + i] || pl[5 + i][23:15] != 0 || pl[5 + i][3:0] > 10)) d_shape = 1'b1;
    if (d_rows == 0 || d_cols == 0 || (d_q_en && d_o_reg_en)) d_shape = 1'b1;
    if (((d_u_mode == 1 || d_u_mode == 2) && d_g_src == 1 && d_g_idx > 3) ||
        ((d_u_mode == 1 || d_u_mode == 3) && d_b_src == 0 && d_b_idx > 3)) d_shape = 1'b1;
    // the hardware subset
    d_prog_ok = 1'b1;
    d_dmode = DM_DELTA;
    if (d_nops == 3 && pl[5][14:0] == P_A_K0 && pl[6][14:0] == P_X_R0 && pl[7][14:0] == P_R1_K1) d_dmode = DM_DELTA;
    else if (d_nops == 2 && pl[5][14:0] == P_X_A && pl[6][14:0] == P_R1_K1) d_dmode = DM_DELTA1;
    else if (d_nops == 1 && pl[5][14:0] == P_X_K1) d_dmode = DM_SCALE;
    else if (d_nops == 1 && pl[5][14:0] == P_A_K1) d_dmode = DM_DOT;
    else d_prog_ok = 1'b0;
    d_unsup = w[0][24 + F_SRC_T] || w[0][24 + F_DST_T] || w[0][24 + F_NODST] || 32'(d_rows) > RMAX ||
              d_cols[5:0] != 0 || 32'(d_cols) > CMAX || d_q_self || d_out_p2 || d_o_reg_en || d_rinit != 0 ||
              d_rsave != 0 || pl[4] != 0 || d_u_mode != 1 || d_b_src != 0 || d_b_idx != 1 || d_d_reg != 2 ||
              !(d_g_src == 3 || (d_g_src == 2 && d_g_idx == 0) || (d_g_src == 1 && d_g_idx == 3)) ||
              !d_prog_ok || (d_q_en && d_q_idx != 0) ||
              d_a_en != (d_dmode != DM_SCALE) || (d_a_en && (d_a_op != 0 || d_a_idx == 0 || d_a_idx == 3));
    // ranges the golden reads or writes (reference 3.8 step 3, and the source, destination and out)
    d_vec = w[4];
    d_ks = 32'(w[1][31:16]);
    d_uses_k0 = d_dmode == DM_DELTA || d_g_src == 2;
    d_state_bytes = 64'(d_rows) * 64'(d_cols) * 4;
    d_src = 64'(w[2]);
    d_dst = 64'(w[3]);
    d_range_t = (d_a_en && 64'(d_vec) + 64'(d_a_idx + 1) * 64'(d_cols) > TMEM_WORDS) ||
              64'(d_vec) + 2 * 64'(d_cols) > TMEM_WORDS ||                               // slot 1 (B)
              (d_g_src == 1 && 64'(d_vec) + 4 * 64'(d_cols) > TMEM_WORDS) ||             // slot 3 (G)
              (d_q_en && 64'(d_vec) + 64'(d_cols) > TMEM_WORDS) ||                        // slot 0 (q)
              (d_uses_k0 && 64'(w[6]) >= TMEM_WORDS) || 64'(w[6]) + 64'(d_ks) >= TMEM_WORDS ||
              (d_dmode != DM_DOT && 64'(w[5]) + 64'(d_rows) > TMEM_WORDS);
    d_range_d = (!w[0][24 + F_ZERO] && d_src + d_state_bytes > (64'(1) << DRAM_LOG2)) ||
              d_dst + d_state_bytes > (64'(1) << DRAM_LOG2) ||
              (d_q_en && 64'(w[7]) + 64'(d_rows) > TMEM_WORDS);
    d_align = (!w[0][24 + F_ZERO] && w[2] % D != 0) || w[3] % D != 0;
    d_overlap = !w[0][24 + F_ZERO] && d_src < d_dst && d_dst < d_src + d_state_bytes;
  end

  // -- DRAM: the reader first, then the writer -------------------------------------------------------------
  logic [31:0] rb_iss, rb_arr, wb_iss, acks, u_beats;
  logic rd_can, wr_can;
  assign rd_can = state == X_RUN && !szero && rb_iss < total && rb_iss - wb_iss < RB;
  assign wr_can = state == X_RUN && wb_iss < u_beats;
  assign req_valid = rd_can || wr_can;
  assign req_write = !rd_can;
  assign req_addr = rd_can ? src + rb_iss * BB : dst + wb_iss * BB;
  assign req_wdata = ring[wb_iss % RB];
  assign req_wstrb = '1;
  assign req_bytes = 16'(BB);
  assign dram_pop = !rd_can && wr_can && req_ready && wb_iss + 1 == total;

  // -- stage K: A = RDOT(S, a), a beat a cycle --------------------------------------------------------
  logic [31:0] k_g, k_r, k_c, kdone, u_r;
  logic k_go, k_last, fk_free, fk_valid, fk_ack;
  logic [31:0] fk_y;
  logic [P-1:0][31:0] pk;
  assign k_last = k_c + 1 == bpr;
  assign k_go = state == X_RUN && (!a_en || vl >= (k_c + 1) * WPB) && k_r < 32'(rows) && (szero || k_g < rb_arr) &&
                (!k_last || fk_free);
  // -- stage U: Y = S * G + Dv * B, O = RDOT(Y, q) -------------------------------------------------------
  logic [31:0] u_g, u_c, odone;
  logic u_go, u_last, fu_free, fu_valid;
  logic [31:0] fu_y, delta;
  logic [P-1:0][31:0] pu;
  logic [31:0] dq [DQ];
  assign u_last = u_c + 1 == bpr;
  assign delta = dq[u_r % DQ];
  assign u_go = state == X_RUN && vl >= q0 + (q_en ? (u_c + 1) * WPB : 0) && u_r < kdone && u_g < wb_iss + RB &&
                (!u_last || fu_free);

  logic [WPB-1:0][31:0] s2;
  logic [WPB-1:0][31:0] k_acc, u_acc;
  for (genvar l = 0; l < WPB; l++) begin : g_lane
    logic [31:0] ck, cu, sk, su, gl, bl, m_sk, m_se, m_dk, m_q;
    assign ck = k_c * WPB + l;
    assign cu = u_c * WPB + l;
    assign sk = szero ? 32'd0 : ring[k_g % RB][32 * l +: 32];   // SZERO: the state reads as +0
    assign su = szero ? 32'd0 : ring[u_g % RB][32 * l +: 32];
    assign gl = gmode == GM_CONST ? k0 : (gmode == GM_SLOT ? gb[8'(cu)] : FP_ONE);
    assign bl = b_is_a ? ab[8'(cu)] : bb[8'(cu)];
    otpu_fp_mul u_sk (.a(sk), .b(ab[8'(ck)]), .y(m_sk));
    otpu_fp_add u_ka (.a(pk[6'(ck)]), .b(m_sk), .sub(1'b0), .y(k_acc[l]));
    otpu_fp_mul u_se (.a(su), .b(gl), .y(m_se));
    otpu_fp_mul u_dk (.a(delta), .b(bl), .y(m_dk));
    otpu_fp_add u_s2 (.a(m_se), .b(m_dk), .sub(1'b0), .y(s2[l]));
    otpu_fp_mul u_q (.a(s2[l]), .b(qb[8'(cu)]), .y(m_q));
    otpu_fp_add u_ua (.a(pu[6'(cu)]), .b(m_q), .sub(1'b0), .y(u_acc[l]));
  end
  logic [P-1:0][31:0] k_part, u_part;          // the partials with this cycle's beat added
  always_comb begin
    k_part = pk;
    u_part = pu;
    for (int l = 0; l < WPB; l++) begin
      k_part[6'(k_c * WPB + l)] = k_acc[l];
      u_part[6'(u_c * WPB + l)] = u_acc[l];
    end
  end

  otpu_dstep_fold #(.NL(WPB)) u_fk (.clk, .rst, .load(k_go && k_last), .in_p(k_part), .free(fk_free),
                                    .valid(fk_valid), .ack(fk_ack), .y(fk_y));
  otpu_dstep_fold #(.NL(WPB)) u_fu (.clk, .rst, .load(u_go && u_last), .in_p(u_part), .free(fu_free),
                                    .valid(fu_valid), .ack(1'b1), .y(fu_y));

  // the scalar program, as the row's A leaves the fold (room for its Dv between the stages):
  // D_DELTA r0 = A * K0, r1 = X - r0, Dv = r1 * K1; D_DELTA1 r1 = X - A; D_SCALE Dv = X * K1; D_DOT Dv = A * K1
  logic [31:0] xr, m_a0, sub_b, m_xs, pre, dl;
  assign xr = xb[8'(kdone)];
  assign fk_ack = kdone < u_r + DQ && (x_en ? vl > v0 + kdone : vl >= v0);
  otpu_fp_mul u_a0 (.a(fk_y), .b(k0), .y(m_a0));
  assign sub_b = dmode == DM_DELTA ? m_a0 : fk_y;
  otpu_fp_add u_xs (.a(xr), .b(sub_b), .sub(1'b1), .y(m_xs));
  assign pre = dmode == DM_SCALE ? xr : (dmode == DM_DOT ? fk_y : m_xs);
  otpu_fp_mul u_dl (.a(pre), .b(k1), .y(dl));

  assign wr_en = fu_valid && q_en;
  assign wr_addr = o_base + odone;
  assign wr_data = fu_y;

  logic [31:0] acks_now;
  assign acks_now = acks + (resp_valid && resp_write ? 1 : 0);
  assign finish = state == X_RUN && odone == 32'(rows) && wb_iss == total && acks_now >= total && elapsed + 1 >= pace;

  task automatic fail(input logic [7:0] code);
    err <= 1'b1;
    err_code <= code;
    state <= X_IDLE;
  endtask

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= X_IDLE;
      err <= 1'b0;
      err_code <= E_NONE;
      vec_k <= 0;
    end else begin
      elapsed <= elapsed + 1;
      vec_k <= vec_got;
      vec_base <= vi;
      vi <= vi + vec_got;
      if (vec_k != 0) begin
        for (int l = 0; l < 2 * LANES; l++) if (32'(l) < vec_k) begin
          logic [31:0] j;
          j = vec_base + l;
          if (state == X_DESC) begin
            if (j < NDESC) dw[5'(j)] <= rd_data[l];
          end
          else if (j < n_a) ab[8'(j)] <= rd_data[l];
          else if (j == n_a) k0 <= rd_data[l];
          else if (j == pk1) k1 <= rd_data[l];
          else if (j < b0) xb[8'(j - v0)] <= rd_data[l];
          else if (j < g0) bb[8'(j - b0)] <= rd_data[l];
          else if (j < q0) gb[8'(j - g0)] <= rd_data[l];
          else if (j < nvec) qb[8'(j - q0)] <= rd_data[l];
        end
        vl <= vec_base + vec_k;
      end
      if (req_valid && req_ready) begin
        if (rd_can) rb_iss <= rb_iss + 1;
        else wb_iss <= wb_iss + 1;
      end
      if (resp_valid && !resp_write && state == X_RUN) begin
        ring[rb_arr % RB] <= resp_rdata;
        rb_arr <= rb_arr + 1;
      end
      if (resp_valid && resp_write) acks <= acks + 1;
      if (k_go) begin
        pk <= k_last ? '0 : k_part;
        k_g <= k_g + 1;
        k_c <= k_last ? 0 : k_c + 1;
        if (k_last) k_r <= k_r + 1;
      end
      if (fk_valid && fk_ack) begin
        dq[kdone % DQ] <= dl;
        kdone <= kdone + 1;
      end
      if (u_go) begin
        pu <= u_last ? '0 : u_part;
        ring[u_g % RB] <= s2;
        u_g <= u_g + 1;
        u_beats <= u_beats + 1;
        u_c <= u_last ? 0 : u_c + 1;
        if (u_last) u_r <= u_r + 1;
      end
      if (fu_valid) odone <= odone + 1;
      if (finish) state <= X_IDLE;
      // a STREAM's descriptor has landed: check it, then run the subset from its fields
      if (state == X_DESC && vl >= NDESC) state <= X_CHECK;
      if (state == X_CHECK) begin
        vi <= 0;
        vl <= 0;
        rows <= 16'(d_rows); cols <= 16'(d_cols);
        src <= w[2]; dst <= w[3];
        a_base <= w[4] + 32'(d_a_idx) * 32'(d_cols);
        b_base <= w[4] + 32'(d_cols);
        g_base <= w[4] + 3 * 32'(d_cols);
        q_base <= w[4];
        k0_addr <= w[6]; k1_addr <= w[6] + 32'(w[1][31:16]);
        x_base <= w[5];
        o_base <= w[7];
        a_en <= d_a_en;
        x_en <= d_dmode != DM_DOT;
        b_is_a <= d_a_en && d_a_idx == 1;
        q_en <= d_q_en;
        dmode <= d_dmode;
        gmode <= d_g_src == 3 ? GM_ONE : (d_g_src == 2 ? GM_CONST : GM_SLOT);
        if (d_shape) fail(E_SHAPE);
        else if (d_unsup) fail(E_UNSUPPORTED);
        else if (d_range_t) fail(E_TMEM_RANGE);
        else if (d_align) fail(E_SHAPE);
        else if (d_range_d) fail(E_TMEM_RANGE);
        else if (d_overlap) fail(E_UNSUPPORTED);
        else state <= X_RUN;
      end
      if (start) begin
        w <= in_w;
        vi <= 0;
        vl <= 0;
        elapsed <= 0;
        rb_iss <= 0; rb_arr <= 0; wb_iss <= 0; acks <= 0; u_beats <= 0;
        k_g <= 0; k_r <= 0; k_c <= 0; kdone <= 0;
        u_g <= 0; u_r <= 0; u_c <= 0; odone <= 0;
        pk <= '0;
        pu <= '0;
        szero <= in_w[0][24 + F_ZERO];
        if (in_w[0][7:0] == OP_STREAM) begin
          if (32'(in_w[1][15:0]) + 5 > TMEM_WORDS) fail(E_TMEM_RANGE);
          else state <= X_DESC;
        end else begin
          // DSTEP: A over k (at qk + cols), D_DELTA with K0 = e = T[g], K1 = beta = T[g + gs], X = v,
          // G = K0, B = k, q at qk
          rows <= in_w[4][15:0]; cols <= in_w[4][31:16];
          src <= in_w[1]; dst <= in_w[1];
          a_base <= in_w[2] + 32'(in_w[4][31:16]);
          k0_addr <= in_w[5]; k1_addr <= in_w[5] + in_w[7];
          x_base <= in_w[3];
          q_base <= in_w[2];
          o_base <= in_w[6];
          a_en <= 1'b1; x_en <= 1'b1; b_is_a <= 1'b1; q_en <= 1'b1;
          dmode <= DM_DELTA;
          gmode <= GM_CONST;
          if (in_w[4][15:0] == 0 || 32'(in_w[4][15:0]) > RMAX || in_w[4][31:16] == 0 || in_w[4][31:16] > CMAX ||
              in_w[4][21:16] != 0 || in_w[1] % D != 0) fail(E_SHAPE);
          else state <= X_RUN;
        end
      end
    end
  end
endmodule
