// otpu_qnt: the quantiser: QACT (TMEM fp32 rows -> ACT RAM int8 with scales; ROW, CSCALE,
// RSCALE and the project's SUB sub-block offsets) and QST (TMEM fp32 rows -> DRAM int8 bytes at
// dst + r*drs + c*es and fp32 scales; ROW, HALF). Arithmetic as fp32.quantize and
// formats.quantize_suboffsets. QACT DUP (PAIR targets) writes each coded block to rows r and
// r + rows of the ACT RAM in the same cycle (the copy MM PAIR reads its odd blocks from).
//
// Two decoupled stages over groups (a D-block, or a whole row in ROW mode), so the unit streams
// LANES source words per cycle as the timing model charges:
// - the reader reads each source word once, LANES per cycle, scales it (RSCALE, CSCALE), keeps
//   it in a group buffer and folds the group's amax (and each D/4 sub-block's amax for SUB) into
//   one of NSLOT group slots; at the group's end its amax enters the composite pipeline's RECIP;
// - the coder takes the oldest group whose reciprocal has come back (s = amax * fp32(1/127),
//   inv = 127 * recip(amax)) and codes CW buffered words per cycle: a D-block of the ACT RAM per
//   block, or bytes assembled into DRAM beats with strobes (a partly written beat merges in the
//   memory), then the group's scale word.
// A QST with element stride > 1 (the V^T append) costs each byte one 64-byte read-modify-write
// of the DRAM's bandwidth and keeps the unit busy VT_APPEND_CYCLES cycles per byte after its
// start; its DRAM writes are issued (and the DRAM port released) as soon as they are coded.
module otpu_qnt
#(
  parameter int D = 32,
  parameter int ROWS = 2,
  parameter int MCOLS = 2,
  parameter int PAIR = 0,
  parameter int LANES = 4,
  parameter int ACT_BLOCKS = 16,
  parameter int BB = 32,
  parameter int VT_APPEND_CYCLES = 8
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   in_valid,
  input  logic [7:0][31:0]       in_w,
  output logic                   take,
  output logic                   release_o,
  output logic                   done,
  output logic                   err,
  output logic [7:0]             err_code,
  // DRAM (QST)
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
  // ACT RAM
  output logic                   act_we,
  output logic [$clog2(ROWS)-1:0] act_wrow,
  output logic [$clog2(ACT_BLOCKS)-1:0] act_wblk,
  output logic [D*8-1:0]         act_wq,
  output logic [31:0]            act_wscale,
  output logic [15:0]            act_wsub,
  output logic                   act_wdup,
  output logic [$clog2(ROWS)-1:0] act_wrow2,
  // TMEM: the source (port X) and the column / row scales (port S)
  output logic [1:0][LANES-1:0]       rd_en,
  output logic [1:0][LANES-1:0][31:0] rd_addr,
  input  logic [1:0]                  rd_gnt,
  input  logic [1:0][LANES-1:0][31:0] rd_data
);
  `include "otpu_defs.svh"
  `include "otpu_fp_funcs.svh"
  localparam int SUBW = D / 4;              // elements per sub-block
  localparam int NSUBS = 4 * ACT_BLOCKS;    // sub-blocks of a row (ROW mode)
  localparam int BQ = 8;                    // assembled DRAM beats waiting
  localparam int CW = D;                    // words the coder codes per cycle (one ACT block)
  localparam int NSLOT = 4;                 // groups between the reader and the coder
  localparam int SW = $clog2(NSLOT);
  localparam int BUFW = 2 * ACT_BLOCKS * D; // group buffer words (two ROW-mode rows)
  localparam int BW = $clog2(BUFW);
  localparam int NROW = (1 << BW) / CW;     // group buffer rows: bank b holds the words at b mod CW
  localparam int NCS = CW / SUBW;           // sub-blocks the coder codes per cycle
  localparam int QNT_LATENCY = 4;           // the model's amax, reciprocal, scale, write

  typedef enum logic [2:0] {S_IDLE, S_RUN, S_DRAIN, S_DONE, S_ERR} state_t;
  state_t state;
  typedef enum logic [1:0] {A_ROWSCALE, A_READ, A_END} rstate_t;
  rstate_t rstate;

  logic [7:0][31:0] w;
  logic        is_qst, row_mode, cscale, rscale, sub, half, strided, dup;
  logic [15:0] rows, kb;
  logic [7:0]  ab;
  logic [31:0] src, srs, dst, sdst, drs, es, cs_addr, rs_addr;
  assign is_qst = w[0][7:0] == OP_QST;
  assign row_mode = w[0][24 + F_ROW];
  assign cscale = !is_qst && w[0][24 + F_CSCALE];
  assign rscale = !is_qst && w[0][24 + F_RSCALE];
  assign sub = !is_qst && w[0][24 + F_SUB];
  assign half = is_qst && w[0][24 + F_HALF];
  assign dup = PAIR != 0 && !is_qst && w[0][24 + F_DUP];
  assign src = w[1];
  assign rows = is_qst ? w[4][15:0] : {8'd0, w[2][7:0]};
  assign kb = is_qst ? w[4][31:16] : w[2][31:16];
  assign ab = w[2][15:8];
  assign srs = is_qst ? w[5] : w[3];
  assign dst = w[2];
  assign sdst = w[3];
  assign drs = w[6];
  assign es = w[7];
  assign cs_addr = w[4];
  assign rs_addr = w[5];
  assign strided = is_qst && es > 1;

  logic [31:0] glen;                         // group length
  assign glen = row_mode ? 32'(kb) * D : D;
  logic [31:0] ncols;
  assign ncols = half ? 32'(kb) * D / 2 : 32'(kb) * D;

  logic [31:0] busy_left;                    // V^T append: cycles the unit stays busy
  assign take = (state == S_IDLE || state == S_DONE) && in_valid;
  assign done = state == S_DONE;
  assign release_o = done;

  // -- group slots --------------------------------------------------------------------------------------
  logic [30:0] g_amax [NSLOT];
  logic [30:0] g_sub [NSLOT * NSUBS];          // slot s, sub-block b at s * NSUBS + b
  logic [15:0] g_r [NSLOT];
  logic [15:0] g_k [NSLOT];
  logic        g_ready [NSLOT];
  logic [31:0] g_s [NSLOT], g_inv [NSLOT];
  logic [SW:0] g_used;                       // slots allocated and not yet coded
  logic [SW-1:0] a_slot, c_slot;             // the reader's and the coder's slot
  logic [31:0] wptr, rptr;                   // words written into / coded out of the buffer

  // -- reader -----------------------------------------------------------------------------------------------
  logic [15:0] r, k;                         // the reader's row and block
  logic [31:0] e;                            // next element of the group to read
  logic [31:0] rs_val;                       // T[rscale + r]
  logic [31:0] gbase;
  assign gbase = row_mode ? 0 : 32'(k) * D;
  logic read_issue, read_go;
  logic src_got, cs_got;                     // this group's source / CSCALE words already read (held)
  logic [LANES-1:0] l_en;
  assign read_issue = state == S_RUN && rstate == A_READ && g_used < NSLOT + 1 && e < glen &&
                      (e != 0 || g_used < NSLOT) && wptr + LANES - rptr <= BUFW;
  always_comb begin
    for (int l = 0; l < LANES; l++) begin
      l_en[l] = e + l < glen;
      rd_addr[0][l] = src + 32'(r) * srs + gbase + e + l;
      rd_addr[1][l] = cs_addr + gbase + e + l;
    end
    if (rstate == A_ROWSCALE) rd_addr[1][0] = rs_addr + 32'(r);
    // a port denied (TMEM_IMPL 3) reads again next cycle; the other port's words wait in its data
    rd_en = '0;
    if (read_issue) begin
      if (!src_got) rd_en[0] = l_en;
      if (cscale && !cs_got) rd_en[1] = l_en;
    end
    read_go = read_issue && (src_got || rd_gnt[0]) && (!cscale || cs_got || rd_gnt[1]);
    if (state == S_RUN && rstate == A_ROWSCALE) rd_en[1][0] = 1'b1;
  end

  // stage 1: the words read last cycle, scaled
  logic [LANES-1:0] s1_en;
  logic [31:0]      s1_e, s1_gbase;
  logic             s1_last;
  logic [SW-1:0]    s1_slot;
  logic [LANES-1:0][31:0] xs, xr, xc;
  for (genvar l = 0; l < LANES; l++) begin : g_scale
    otpu_fp_mul u_rs (.a(rd_data[0][l]), .b(rs_val), .y(xr[l]));
    otpu_fp_mul u_cs (.a(rscale ? xr[l] : rd_data[0][l]), .b(rd_data[1][l]), .y(xc[l]));
  end
  always_comb for (int l = 0; l < LANES; l++)
    xs[l] = cscale ? xc[l] : (rscale ? xr[l] : ftz(rd_data[0][l]));

  // the group's amax with this cycle's words folded in
  logic [30:0] am_next;
  always_comb begin
    am_next = g_amax[s1_slot];
    for (int l = 0; l < LANES; l++)
      if (s1_en[l] && xs[l][30:0] > am_next) am_next = xs[l][30:0];
  end

  // -- the reciprocal (composite pipeline), one group per cycle at most ---------------------------------------
  logic        rc_valid;
  logic [31:0] rc_y;
  logic [15:0] rc_tag;
  logic        rc_in;
  logic [30:0] rc_x;
  logic [SW-1:0] rc_slot;
  assign rc_in = |s1_en && s1_last;             // a group's amax is complete: straight into RECIP
  assign rc_x = am_next;
  assign rc_slot = s1_slot;
  otpu_fp_composite #(.TAG_W(16)) u_recip (.clk, .rst, .en(1'b1), .in_valid(rc_in), .in_func(2'd1),
                                           .in_x({1'b0, rc_x}), .in_tag(16'(rc_slot)), .out_valid(rc_valid),
                                           .out_y(rc_y), .out_tag(rc_tag));
  logic [31:0] inv_full, s_full;
  logic [30:0] rc_amax;
  assign rc_amax = g_amax[SW'(rc_tag)];
  otpu_fp_mul u_inv (.a(F127), .b(rc_y), .y(inv_full));
  otpu_fp_mul u_s (.a({1'b0, rc_amax}), .b(INV127), .y(s_full));

  // -- coder ----------------------------------------------------------------------------------------------------
  logic [31:0] c;                            // next element of the coder's group
  logic [15:0] cr, ck;
  logic [31:0] cgbase, inv, s_val;
  logic        cfin;                         // the coder has coded every group
  assign cr = g_r[c_slot];
  assign ck = g_k[c_slot];
  assign cgbase = row_mode ? 0 : 32'(ck) * D;
  logic [31:0] c_inv, c_s;
  assign inv = c_inv;
  assign s_val = c_s;
  logic [$clog2(BQ+1)-1:0] bq_n;
  logic code_go;
  logic [31:0] ce;                           // elements coded this cycle
  assign ce = strided ? 1 : CW;
  logic c_ready;                             // the coder's group has its scale (this cycle's RECIP too)
  assign c_ready = g_ready[c_slot] || (rc_valid && SW'(rc_tag) == c_slot);
  assign c_inv = g_ready[c_slot] ? g_inv[c_slot] : (rc_amax == 0 ? 32'd0 : inv_full);
  assign c_s = g_ready[c_slot] ? g_s[c_slot] : (rc_amax == 0 ? 32'd0 : s_full);
  assign code_go = state == S_RUN && !cfin && g_used != 0 && c_ready &&
                   (!is_qst || 32'(bq_n) + (strided ? 1 : 2) + 3 <= BQ);
  logic [CW-1:0] c_en;
  logic [CW-1:0][31:0] cx, inv_b, qx;
  logic [CW-1:0][2:0]  e_b;
  logic [CW-1:0][7:0]  code;
  always_comb for (int l = 0; l < CW; l++) c_en[l] = code_go && 32'(l) < ce && c + l < glen;

  // The group buffer in CW banks of NROW words. The reader writes LANES words at wptr, a multiple
  // of LANES (a group is a multiple of D words, so every read is LANES words): one bank each, in
  // one row. The coder reads CW words at rptr, a multiple of CW (one row, lane l from bank l),
  // except the V^T append's one word a cycle at any rptr, which lane 0 takes from its bank.
  logic [CW-1:0][31:0] brow;                 // the row the coder reads
  logic [BW-1:0] bw_at, br_at;
  assign bw_at = BW'(wptr);
  assign br_at = BW'(rptr);
  for (genvar b = 0; b < CW; b++) begin : g_bank
    logic [31:0] mem [NROW];
    always_ff @(posedge clk)
      if (!rst && |s1_en && s1_en[b % LANES] && 32'(bw_at) % CW / LANES == b / LANES)
        mem[32'(bw_at) / CW] <= xs[b % LANES];
    assign brow[b] = mem[32'(br_at) / CW];
  end
  always_comb for (int l = 0; l < CW; l++) cx[l] = l == 0 ? brow[32'(br_at) % CW] : brow[l];

  // Per sub-block: its amax times inv (t), its offset e and inv * 2^e; a coder row starts on a
  // sub-block boundary (the V^T append, one word a cycle, has no sub-blocks: lane 0 is block 0's).
  logic [NCS-1:0][31:0] t_s, inv_s;
  logic [NCS-1:0][2:0]  e_s;
  logic [31:0] c_sub0;
  assign c_sub0 = 32'(c_slot) * NSUBS + (cgbase + c) / SUBW;
  for (genvar j = 0; j < NCS; j++) begin : g_subc
    logic [7:0] e_bias;   // 127 + e, named: yosys widens a size cast inside a port's concatenation
    assign e_bias = 8'(127 + e_s[j]);
    otpu_fp_mul u_t (.a({1'b0, g_sub[c_sub0 + j]}), .b(inv), .y(t_s[j]));
    otpu_fp_mul u_invb (.a(inv), .b({1'b0, e_bias, 23'd0}), .y(inv_s[j]));
  end
  for (genvar l = 0; l < CW; l++) begin : g_code
    assign inv_b[l] = inv_s[l / SUBW];
    otpu_fp_mul u_q (.a(cx[l]), .b(sub ? inv_b[l] : inv), .y(qx[l]));
  end
  // the largest e in 0..7 with t <= 127 * 2^-e (0 for t = 0 or NaN): sub-block offsets
  function automatic logic [2:0] sub_offset(input logic [31:0] t);
    logic [2:0] n;
    n = 0;
    for (int j = 1; j <= 7; j++) if (t <= {1'b0, 8'(133 - j), 23'h7E0000}) n = 3'(j);
    sub_offset = (t == 0 || is_nan(t)) ? 3'd0 : n;
  endfunction
  always_comb for (int j = 0; j < NCS; j++) e_s[j] = sub_offset(t_s[j]);
  always_comb for (int l = 0; l < CW; l++) begin
    e_b[l] = e_s[l / SUBW];
    code[l] = q8(qx[l]);
  end

  // ACT block buffer and its side word
  logic [D*8-1:0] blk_q;
  logic [15:0]    blk_side;

  // -- QST: beats with strobes --------------------------------------------------------------------------------------
  logic [BB*8-1:0] bq_data [BQ];
  logic [BB-1:0]   bq_strb [BQ];
  logic [31:0]     bq_beat [BQ];
  logic [BB*8-1:0] cb_data;
  logic [BB-1:0]   cb_strb;
  logic [31:0]     cb_beat;
  logic            cb_any;
  logic [31:0]     writes, acks;
  assign req_valid = is_qst && bq_n != 0 && (state == S_RUN || state == S_DRAIN);
  assign req_write = 1'b1;
  assign req_addr = bq_beat[0] * BB;
  assign req_wdata = bq_data[0];
  assign req_wstrb = bq_strb[0];
  assign req_bytes = strided ? 16'd64 : 16'($countones(bq_strb[0]));
  assign dram_pop = state == S_DRAIN && bq_n == 1 && req_ready;

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      err <= 1'b0;
      err_code <= E_NONE;
      bq_n <= 0;
      act_we <= 1'b0;
      act_wdup <= 1'b0;
      g_used <= 0;
      s1_en <= '0;
    end else begin
      logic [BB*8-1:0] qd [BQ];
      logic [BB-1:0]   qs [BQ];
      logic [31:0]     qb [BQ];
      logic [$clog2(BQ+1)-1:0] n;
      logic [BB*8-1:0] cd;
      logic [BB-1:0]   cs;
      logic [31:0]     cbt;
      logic            ca;
      logic            alloc, free;
      act_we <= 1'b0;
      alloc = 1'b0;
      free = 1'b0;
      for (int i = 0; i < BQ; i++) begin qd[i] = bq_data[i]; qs[i] = bq_strb[i]; qb[i] = bq_beat[i]; end
      n = bq_n;
      cd = cb_data; cs = cb_strb; cbt = cb_beat; ca = cb_any;
      if (req_valid && req_ready) begin
        for (int i = 0; i < BQ - 1; i++) begin qd[i] = qd[i + 1]; qs[i] = qs[i + 1]; qb[i] = qb[i + 1]; end
        n = n - 1;
      end
      if (resp_valid && resp_write) acks <= acks + 1;
      if (busy_left != 0) busy_left <= busy_left - 1;

      // -- reader --
      s1_en <= read_go ? l_en : '0;
      s1_e <= e;
      s1_gbase <= gbase;
      s1_slot <= a_slot;
      s1_last <= read_go && e + LANES >= glen;
      if (read_go) begin
        src_got <= 1'b0;
        cs_got <= 1'b0;
      end else if (read_issue) begin
        src_got <= src_got || rd_gnt[0];
        cs_got <= cs_got || (cscale && rd_gnt[1]);
      end
      if (read_go) begin
        if (e == 0) begin
          alloc = 1'b1;
          g_r[a_slot] <= r;
          g_k[a_slot] <= k;
          g_ready[a_slot] <= 1'b0;
        end
        e <= e + LANES;
        if (e + LANES >= glen) begin
          // the next group, row, or the end
          e <= 0;
          a_slot <= a_slot + 1;
          if (!row_mode && 32'(k) + 1 < 32'(kb)) k <= k + 1;
          else if (32'(r) + 1 < 32'(rows)) begin
            r <= r + 1;
            k <= 0;
            if (rscale) rstate <= A_ROWSCALE;
          end else rstate <= A_END;
        end
      end
      if (state == S_RUN && rstate == A_ROWSCALE && rd_gnt[1]) rstate <= A_READ;
      if (|s1_en) begin
        // the lanes of one sub-block fold into a running maximum; its last lane writes it
        logic [30:0] run;
        logic [31:0] prev;
        run = 0;
        prev = 32'hFFFFFFFF;
        for (int l = 0; l < LANES; l++)
          if (s1_en[l]) begin
            logic [31:0] sb, idx;
            sb = (s1_gbase + s1_e + l) / SUBW;
            idx = 32'(s1_slot) * NSUBS + sb;
            if (sb != prev) run = g_sub[idx];
            if (xs[l][30:0] > run) run = xs[l][30:0];
            g_sub[idx] <= run;
            prev = sb;
          end
        g_amax[s1_slot] <= am_next;
        wptr <= wptr + 32'($countones(s1_en));
      end
      if (rc_valid) begin
        g_s[SW'(rc_tag)] <= rc_amax == 0 ? 32'd0 : s_full;
        g_inv[SW'(rc_tag)] <= rc_amax == 0 ? 32'd0 : inv_full;
        g_ready[SW'(rc_tag)] <= 1'b1;
      end

      // -- coder --
      if (code_go) begin
        logic [D*8-1:0] bqv;
        logic [15:0] side;
        logic [31:0] nc, a_row;
        // byte l's DRAM address is a_row + l * es: es is 0 or 1 unless the V^T append codes lane 0 alone
        a_row = dst + 32'(cr) * drs + (cgbase + c) * es;
        bqv = blk_q;
        side = blk_side;
        nc = 0;
        for (int l = 0; l < CW; l++)
          if (c_en[l]) begin
            logic [31:0] col;
            nc = nc + 1;
            col = cgbase + c + l;
            // a QACT codes whole ACT blocks (col % D is l); blk_q only feeds the ACT RAM
            bqv[8 * l +: 8] = code[l];
            side[3 * (l / SUBW) +: 3] = sub ? e_b[l] : 3'd0;
            if (is_qst && col < ncols) begin
              logic [31:0] a;
              a = a_row + (es == 1 ? 32'(l) : 32'd0);
              if (ca && a / BB != cbt) begin qd[n] = cd; qs[n] = cs; qb[n] = cbt; n = n + 1; cs = '0; ca = 1'b0; end
              cbt = a / BB;
              ca = 1'b1;
              cd[8 * (a % BB) +: 8] = code[l];
              cs[a % BB] = 1'b1;
            end
            if (!is_qst && (col % D == D - 1 || col + 1 == 32'(kb) * D)) begin
              act_we <= 1'b1;
              act_wrow <= $bits(act_wrow)'(cr);
              act_wdup <= dup;
              act_wrow2 <= $bits(act_wrow2)'(32'(cr) + 32'(rows));
              act_wblk <= $bits(act_wblk)'(32'(ab) + col / D);
              act_wq <= bqv;
              act_wscale <= s_val;
              act_wsub <= sub ? (side | 16'h8000) : 16'd0;
            end
          end
        blk_q <= bqv;
        blk_side <= side;
        rptr <= rptr + nc;
        c <= c + nc;
        if (c + nc >= glen) begin
          // the group's scale word (QST); the slot is free again
          if (is_qst) begin
            logic [31:0] a;
            a = row_mode ? sdst + 4 * 32'(cr) : sdst + 4 * (32'(cr) * 32'(kb) + 32'(ck));
            if (ca && a / BB != cbt) begin qd[n] = cd; qs[n] = cs; qb[n] = cbt; n = n + 1; cs = '0; ca = 1'b0; end
            cbt = a / BB;
            ca = 1'b1;
            cd[8 * (a % BB) +: 32] = s_val;
            cs[a % BB +: 4] = 4'hF;
          end
          free = 1'b1;
          g_amax[c_slot] <= 0;
          for (int i = 0; i < NSUBS; i++) g_sub[32'(c_slot) * NSUBS + i] <= 0;
          c_slot <= c_slot + 1;
          c <= 0;
          if (32'(cr) + 1 >= 32'(rows) && (row_mode || 32'(ck) + 1 >= 32'(kb))) begin
            cfin <= 1'b1;
            if (!is_qst && busy_left <= 1) state <= S_DONE;
            if (is_qst) begin
              if (ca) begin qd[n] = cd; qs[n] = cs; qb[n] = cbt; n = n + 1; cs = '0; ca = 1'b0; end
              state <= S_DRAIN;
            end
          end
        end
      end
      g_used <= g_used + (alloc ? 1 : 0) - (free ? 1 : 0);

      case (state)
        S_RUN: if (cfin && !is_qst && busy_left <= 1) state <= S_DONE;
        S_DRAIN: if (bq_n == 0 && acks == writes && busy_left <= 1) state <= S_DONE;
        S_DONE: state <= S_IDLE;
        default: ;
      endcase
      if (req_valid && req_ready) writes <= writes + 1;

      for (int i = 0; i < BQ; i++) begin bq_data[i] <= qd[i]; bq_strb[i] <= qs[i]; bq_beat[i] <= qb[i]; end
      bq_n <= n;
      cb_data <= cd; cb_strb <= cs; cb_beat <= cbt; cb_any <= ca;

      if (take) begin
        w <= in_w;
        r <= 0; k <= 0; e <= 0; c <= 0;
        a_slot <= 0; c_slot <= 0; g_used <= 0;
        wptr <= 0; rptr <= 0;
        cfin <= 1'b0;
        src_got <= 1'b0;
        cs_got <= 1'b0;
        for (int s = 0; s < NSLOT; s++) begin
          g_amax[s] <= 0;
          g_ready[s] <= 1'b0;
          for (int i = 0; i < NSUBS; i++) g_sub[s * NSUBS + i] <= 0;
        end
        writes <= 0;
        acks <= 0;
        cb_any <= 1'b0;
        cb_strb <= '0;
        blk_side <= 0;
        rstate <= (in_w[0][7:0] == OP_QACT && in_w[0][24 + F_RSCALE]) ? A_ROWSCALE : A_READ;
        // V^T append: VT_APPEND_CYCLES per stored byte on top of the source stream
        busy_left <= 0;
        if (in_w[0][7:0] == OP_QST && in_w[7] > 1)
          busy_left <= 32'(in_w[4][15:0]) * ((in_w[0][24 + F_HALF] ? 32'(in_w[4][31:16]) * D / 2 : 32'(in_w[4][31:16]) * D)
                       * VT_APPEND_CYCLES + 32'(in_w[4][31:16]) * D / LANES) + QNT_LATENCY;
        // QACT's checks in the golden simulator's order (sim/matrix.py qact)
        if (in_w[0][7:0] == OP_QACT) begin
          logic [31:0] qr, qk;
          logic qdup;
          qr = 32'(in_w[2][7:0]);
          qk = 32'(in_w[2][31:16]);
          qdup = in_w[0][24 + F_DUP];
          if (qr == 0 || qk == 0 || (qdup && PAIR != 0 && 2 * qr > MCOLS) || (!qdup && qr > ROWS) ||
              32'(in_w[2][15:8]) + qk > ACT_BLOCKS || (in_w[0][24 + F_SUB] && !in_w[0][24 + F_ROW]) ||
              (qdup && PAIR == 0)) begin
            err <= 1'b1;
            err_code <= qdup && PAIR == 0 && qr != 0 && qk != 0 ? E_OPCODE : E_SHAPE;
            state <= S_ERR;
          end else state <= S_RUN;
        end else state <= S_RUN;
      end
    end
  end

  // the row scale arrives the cycle after its read
  logic rs_pending;
  always_ff @(posedge clk) begin
    rs_pending <= state == S_RUN && rstate == A_ROWSCALE && rd_gnt[1];
    if (rs_pending) rs_val <= rd_data[1][0];
  end
endmodule
